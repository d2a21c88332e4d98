// Package stdmetrics serves a component's own metrics together with the
// series every Kubernetes component exposes (component-base's registry: go,
// process, client-go workqueue, REST client and leader election), on one
// endpoint. It is a leaf both binaries use.
package stdmetrics

import (
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	// Registers client-go's workqueue, REST client, leader election and
	// informer FIFO metrics on the legacy registry, as every Kubernetes
	// component does.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
)

// Handler serves own (the component's registry) together with
// component-base's legacy registry: go_*, process_*, workqueue_* per named
// queue, rest_client_*, leader_election_*, the series an operator's
// Kubernetes dashboards expect from any component. A family of own wins
// over a same-named one of the legacy registry (process_start_time_seconds,
// for example, can be in both).
func Handler(own prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(mergedGatherer{own, legacyregistry.DefaultGatherer}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// mergedGatherer gathers first, then the families of rest that first does
// not have, sorted by name as the exposition format expects.
type mergedGatherer struct{ first, rest prometheus.Gatherer }

// Gather implements prometheus.Gatherer.
func (m mergedGatherer) Gather() ([]*dto.MetricFamily, error) {
	out, err := m.first.Gather()
	seen := make(map[string]bool, len(out))
	for _, f := range out {
		seen[f.GetName()] = true
	}
	more, err2 := m.rest.Gather()
	for _, f := range more {
		if !seen[f.GetName()] {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	if err == nil {
		err = err2
	}
	return out, err
}
