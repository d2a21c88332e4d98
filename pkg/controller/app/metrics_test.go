package app_test

import (
	dto "github.com/prometheus/client_model/go"
)

// metricValue returns the value of one series (label values in label-name
// order) of a counter, gauge or histogram (sample count) in the env's
// registry; 0 when the series does not exist.
func (e *env) metricValue(name string, labelValues ...string) float64 {
	e.t.Helper()
	mfs, err := e.registry.Gather()
	if err != nil {
		e.t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !matches(m, labelValues) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, values []string) bool {
	if len(m.GetLabel()) != len(values) {
		return false
	}
	for i, l := range m.GetLabel() {
		if l.GetValue() != values[i] {
			return false
		}
	}
	return true
}
