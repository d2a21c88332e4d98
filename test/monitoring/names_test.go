package monitoring

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"fenceline.io/fenceline/pkg/attacher/heartbeat"
	attachermetrics "fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/component/leader"
	// The series every component serves beside its own (workqueue, REST
	// client, leader election), registered as the binaries register them.
	_ "fenceline.io/fenceline/pkg/component/stdmetrics"
	controllerapp "fenceline.io/fenceline/pkg/controller/app"
	controllermetrics "fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/fenceagent/executor"
	"fenceline.io/fenceline/pkg/fenceagent/probe"
)

// Every metric the alerts and the dashboard query is one the components
// register, under that name: renaming a metric breaks this test, not the
// on-call engineer's alert.
func TestMonitoredMetricsExist(t *testing.T) {
	alerts, err := readAlerts()
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	for where, e := range dashboardExprs(readDashboard(t)) {
		exprs["dashboard "+where] = e
	}
	var list []string
	for _, e := range exprs {
		list = append(list, e)
	}
	used, err := metricNames(list)
	if err != nil {
		t.Fatal(err)
	}
	have := registeredNames(t)
	seen := 0
	for where, e := range exprs {
		for _, name := range used[e] {
			seen++
			if !have[name] {
				t.Errorf("%s uses %s, which no component registers", where, name)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no metric names found in the alerts and the dashboard")
	}
	if t.Failed() {
		t.Logf("registered: %s", strings.Join(sortedKeys(have), " "))
	}
}

// registeredNames returns the series names the components can expose: each
// family's name, and a histogram's _bucket, _count and _sum.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	// fenceline-controller and fenceline-fence-agent: their own registries.
	rec := &recordingRegisterer{Registerer: prometheus.NewRegistry()}
	if _, err := controllermetrics.New(rec); err != nil {
		t.Fatal(err)
	}
	for _, d := range controllerapp.Controllers {
		if d.Metrics == nil {
			continue
		}
		if err := controllermetrics.Register(rec, d.Metrics().Collectors()...); err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
	}
	if _, err := probe.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := executor.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	// fenceline-attacher: csi-lib-utils' registry, which also holds
	// csi_sidecar_operations_seconds.
	cmm := csimetrics.NewCSIMetricsManagerForSidecar("")
	cmm.SetDriverName("csi.example.com")
	cmm.RecordMetrics("/csi.v1.Controller/ControllerUnpublishVolume", errors.New("unimplemented"), time.Millisecond)
	kr := &recordingKubeRegistry{KubeRegistry: cmm.GetRegistry()}
	attachermetrics.New(kr)
	heartbeat.NewMetrics(kr)
	attachermetrics.RegisterState(kr, noState{})
	for _, c := range append(rec.collectors, kr.collectors...) {
		describe(t, c, names)
	}
	gather(t, cmm.GetRegistry(), names)

	// The standard series: a named queue, one REST request and one
	// leadership make client-go create theirs.
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "monitoring-test"})
	q.Add("x")
	defer q.ShutDown()
	restRequest(t)
	lead(t)
	gather(t, legacyregistry.DefaultGatherer, names)
	for _, want := range []string{"fenceline_attacher_pending_detaches", "workqueue_depth", "rest_client_requests_total", "leader_election_master_status", "csi_sidecar_operations_seconds_count"} {
		if !names[want] {
			t.Fatalf("the registries read in-process lack %s; the test would miss renames", want)
		}
	}
	return names
}

// recordingRegisterer registers as its Registerer does and keeps the
// collectors, whose descriptions name the metrics.
type recordingRegisterer struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// recordingKubeRegistry does the same for component-base's registries.
type recordingKubeRegistry struct {
	k8smetrics.KubeRegistry
	collectors []prometheus.Collector
}

func (r *recordingKubeRegistry) MustRegister(cs ...k8smetrics.Registerable) {
	r.KubeRegistry.MustRegister(cs...)
	for _, c := range cs {
		r.collectors = append(r.collectors, c)
	}
}

func (r *recordingKubeRegistry) CustomMustRegister(cs ...k8smetrics.StableCollector) {
	r.KubeRegistry.CustomMustRegister(cs...)
	for _, c := range cs {
		r.collectors = append(r.collectors, c)
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// describe adds the names c describes. A description carries no type, so a
// histogram is known by its Go type.
func describe(t *testing.T, c prometheus.Collector, names map[string]bool) {
	t.Helper()
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	histogram := false
	switch c.(type) {
	case *prometheus.HistogramVec, prometheus.Histogram, *k8smetrics.HistogramVec, *k8smetrics.Histogram:
		histogram = true
	}
	n := 0
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		add(names, m[1], histogram)
		n++
	}
	if n == 0 {
		t.Fatalf("collector %T describes no metric", c)
	}
}

func gather(t *testing.T, g prometheus.Gatherer, names map[string]bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		add(names, mf.GetName(), mf.GetType() == dto.MetricType_HISTOGRAM)
	}
}

func add(names map[string]bool, name string, histogram bool) {
	names[name] = true
	if histogram {
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			names[name+s] = true
		}
	}
}

// restRequest makes one request through a client-go clientset.
func restRequest(t *testing.T) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.1"}`))
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
}

// lead takes a Lease through the components' leader election.
func lead(t *testing.T) {
	t.Helper()
	client := kubefake.NewClientset()
	e, err := leader.New(leader.Config{
		Options: leader.Options{Enabled: true, Namespace: "fenceline-system", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
		Name:    "monitoring-test", Identity: "test", Core: client.CoreV1(), Coordination: client.CoordinationV1(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	led := false
	if err := e.Run(ctx, func(context.Context) error { led = true; return nil }); err != nil {
		t.Fatalf("leader election: %v", err)
	}
	if !led {
		t.Fatal("never led")
	}
}

// noState is an attacher with nothing pending.
type noState struct{}

func (noState) PendingDetaches() []attachermetrics.PendingDetach { return nil }
func (noState) FenceCapabilities() map[string]bool               { return nil }
func (noState) Blind() bool                                      { return false }
func (noState) QueueWaits() map[string]time.Duration             { return nil }

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }
