package metrics

import (
	"strings"
	"testing"
	"time"

	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

func TestRecorder(t *testing.T) {
	reg := k8smetrics.NewKubeRegistry()
	r := New(reg)
	r.Detach("fenced", "out-of-service", ResultSuccess)
	r.Detach("plain", "", ResultError)
	r.Detach("plain", "", ResultError)
	r.Detached("fenced", "out-of-service", 1500*time.Millisecond)

	want := `
# HELP fenceline_attacher_detaches_total [ALPHA] ControllerUnpublishVolume attempts for deleted VolumeAttachments by mode (fenced or plain), fence reason and result.
# TYPE fenceline_attacher_detaches_total counter
fenceline_attacher_detaches_total{mode="fenced",reason="out-of-service",result="success"} 1
fenceline_attacher_detaches_total{mode="plain",reason="none",result="error"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceline_attacher_detaches_total"); err != nil {
		t.Error(err)
	}
	count, err := testutil.GetHistogramMetricCount(r.detachDuration.WithLabelValues("fenced", "out-of-service"))
	if err != nil || count != 1 {
		t.Errorf("detach duration samples = %d, %v; want 1", count, err)
	}
}

func TestNilRecorderIsANoOp(t *testing.T) {
	var r *Recorder
	r.Detach("plain", "", ResultSuccess)
	r.Detached("plain", "", time.Second)
}
