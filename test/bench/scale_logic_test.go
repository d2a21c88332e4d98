package bench

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseScaleSizes(t *testing.T) {
	got, err := parseScaleSizes(defaultScaleSizes)
	if err != nil {
		t.Fatal(err)
	}
	want := []scaleSize{{500, 1000}, {1000, 5000}, {2000, 20000}, {5000, 50000}}
	if !slices.Equal(got, want) {
		t.Fatalf("default sizes = %v, want %v", got, want)
	}
	if got, err := parseScaleSizes(" 10X0 , ,3x7"); err != nil || !slices.Equal(got, []scaleSize{{10, 0}, {3, 7}}) {
		t.Fatalf("spaces, empty items and upper-case X: %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "500", "0x10", "-1x10", "10x-1", "ax10", "10xb", "10x10x10"} {
		if got, err := parseScaleSizes(bad); err == nil {
			t.Errorf("parseScaleSizes(%q) = %v, want an error", bad, got)
		}
	}
}

func TestLoadScaleSettings(t *testing.T) {
	t.Setenv("FENCELINE_BENCH_SCALE_SIZES", "")
	t.Setenv("FENCELINE_BENCH_SCALE_VICTIM_PODS", "")
	t.Setenv("FENCELINE_BENCH_SCALE_IDLE", "")
	t.Setenv("FENCELINE_BENCH_SCALE_LEASE_SECONDS", "")
	t.Setenv("FENCELINE_BENCH_SCALE_QPS", "")
	s, err := loadScaleSettings()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Sizes) != 4 || s.VictimPods != 100 || s.Idle != time.Minute || s.LeaseSeconds != 40 || s.AttacherQPS != 0 {
		t.Fatalf("defaults: %+v", s)
	}
	t.Setenv("FENCELINE_BENCH_SCALE_SIZES", "500x1000")
	t.Setenv("FENCELINE_BENCH_SCALE_IDLE", "30s")
	t.Setenv("FENCELINE_BENCH_SCALE_QPS", "50")
	if s, err = loadScaleSettings(); err != nil || len(s.Sizes) != 1 || s.Idle != 30*time.Second || s.AttacherQPS != 50 {
		t.Fatalf("from the environment: %+v, %v", s, err)
	}
	for env, bad := range map[string]string{
		"FENCELINE_BENCH_SCALE_SIZES":         "500",
		"FENCELINE_BENCH_SCALE_VICTIM_PODS":   "111",
		"FENCELINE_BENCH_SCALE_IDLE":          "5s",
		"FENCELINE_BENCH_SCALE_LEASE_SECONDS": "300",
		"FENCELINE_BENCH_SCALE_QPS":           "many",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			if _, err := loadScaleSettings(); err == nil || !strings.Contains(err.Error(), env) {
				t.Fatalf("%s=%s: error %v, want one naming the variable", env, bad, err)
			}
		})
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command with a space and a parenthesis; utime 250, stime 50 ticks.
	stat := "4242 (kube (api) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 1000000 5000 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Fatalf("CPU time = %s, want 3s", got)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 ten 12"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): want an error", bad)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tfenceline-contr\nVmPeak:\t 1300000 kB\nVmHWM:\t   204800 kB\nVmRSS:\t   102400 kB\nThreads:\t12\n"
	m, err := parseStatusMemory(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 100<<20 || m.Peak != 200<<20 {
		t.Fatalf("memory = %+v, want RSS 100 MiB, peak 200 MiB", m)
	}
	if _, err := parseStatusMemory(strings.NewReader("VmRSS:\t 1 kB\n")); err == nil {
		t.Fatal("no VmHWM: want an error")
	}
}

func TestSumSamples(t *testing.T) {
	exp := `# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 120
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 3.5
rest_client_requests_total_other 1000
rest_client_requests_total_bucket{le="1"} 1000
rest_client_request_duration_seconds_sum 7
`
	got, ok, err := sumSamples(exp, "rest_client_requests_total")
	if err != nil || !ok || got != 123.5 {
		t.Fatalf("sum = %v, %v, %v; want 123.5", got, ok, err)
	}
	if got, ok, err := sumSamples("go_goroutines 12\n", "go_goroutines"); err != nil || !ok || got != 12 {
		t.Fatalf("unlabelled sample: %v, %v, %v", got, ok, err)
	}
	if _, ok, err := sumSamples(exp, "workqueue_adds_total"); err != nil || ok {
		t.Fatalf("missing family: ok=%v err=%v", ok, err)
	}
	if _, _, err := sumSamples(`rest_client_requests_total{code="200" 1`, "rest_client_requests_total"); err == nil {
		t.Fatal("unterminated labels: want an error")
	}
}

func TestNewScaleReport(t *testing.T) {
	run := func(nodes, pods int, deleted, fenced time.Duration, rss float64) scaleRun {
		return scaleRun{Size: scaleSize{nodes, pods}, VictimPods: 100, PodsDeleted: deleted, VAsFenced: fenced,
			Controller: componentUsage{usage: usage{CPUPercent: 1.5, RSSMB: rss, PeakRSSMB: rss + 10}, RequestsPerMin: 30, ReactionRequests: 300},
			Attacher:   componentUsage{usage: usage{CPUPercent: 0.5, RSSMB: 40}, RequestsPerMin: 20, ReactionRequests: 250},
			Processes:  map[string]usage{"kube-apiserver": {CPUPercent: 50, RSSMB: 900}}}
	}
	// Given out of order: the ratio is the largest size over the smallest.
	r := newScaleReport(scaleSettings{}, []scaleRun{
		run(5000, 50000, 600*time.Millisecond, 6*time.Second, 350),
		run(500, 1000, 500*time.Millisecond, 5*time.Second, 60),
	})
	if r.PodsDeletedRatio != 1.2 || math.Abs(r.VAsFencedRatio-1.2) > 1e-9 {
		t.Fatalf("ratios %v, %v; want 1.2, 1.2", r.PodsDeletedRatio, r.VAsFencedRatio)
	}
	for _, want := range []string{"reaction at 5000x50000 / at 500x1000: pods deleted 1.2x, VAs fenced 1.2x", "controller RSS at 5000x50000: 350 MB, peak 360 MB"} {
		if !slices.ContainsFunc(r.Verdicts, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("verdicts %q lack %q", r.Verdicts, want)
		}
	}
	for _, want := range []string{"5000x50000", "0.60 s", "6.00 s", "1.5 %", "350 MB", "3.0", "2.5"} {
		if !strings.Contains(r.Table, want) {
			t.Errorf("table lacks %q:\n%s", want, r.Table)
		}
	}
	if !strings.Contains(r.Context, "900 MB") {
		t.Errorf("context lacks the API server's memory:\n%s", r.Context)
	}

	one := newScaleReport(scaleSettings{}, []scaleRun{run(500, 1000, time.Second, time.Second, 60)})
	if one.PodsDeletedRatio != 1 {
		t.Fatalf("one size: ratio %v", one.PodsDeletedRatio)
	}
	if !strings.Contains(strings.Join(one.Verdicts, "\n"), "the largest size run (the target is for 50000 pods)") {
		t.Fatalf("one small size: verdicts %q should say the RSS target is for 50000 pods", one.Verdicts)
	}
	if empty := newScaleReport(scaleSettings{}, nil); len(empty.Verdicts) != 0 || !math.IsNaN(empty.PodsDeletedRatio) {
		t.Fatalf("no runs: %+v", empty)
	}
}

func TestParseVACounts(t *testing.T) {
	got, err := parseVACounts(defaultScaleVAs, 100)
	if err != nil || !slices.Equal(got, []int{5000, 20000, 50000}) {
		t.Fatalf("default counts = %v, %v", got, err)
	}
	if got, err := parseVACounts(" 101 , ,300", 100); err != nil || !slices.Equal(got, []int{101, 300}) {
		t.Fatalf("spaces and empty items: %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "100", "50", "-1", "5k", "1e4", "10x10"} {
		if got, err := parseVACounts(bad, 100); err == nil {
			t.Errorf("parseVACounts(%q) = %v, want an error", bad, got)
		}
	}
}

func TestLoadVAScaleSettings(t *testing.T) {
	for _, env := range []string{"FENCELINE_BENCH_SCALE_VAS", "FENCELINE_BENCH_SCALE_VAS_PER_NODE", "FENCELINE_BENCH_SCALE_ATTACHER_QPS",
		"FENCELINE_BENCH_SCALE_VICTIM_PODS", "FENCELINE_BENCH_SCALE_IDLE", "FENCELINE_BENCH_SCALE_LEASE_SECONDS"} {
		t.Setenv(env, "")
	}
	s, err := loadVAScaleSettings()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.VAs, []int{5000, 20000, 50000}) || s.VAsPerNode != 10 || s.VictimVAs != 100 || s.AttacherQPS != 100 ||
		s.AttacherBurst != 200 || s.Idle != time.Minute || s.LeaseSeconds != 40 {
		t.Fatalf("defaults: %+v", s)
	}
	t.Setenv("FENCELINE_BENCH_SCALE_VAS", "50000")
	t.Setenv("FENCELINE_BENCH_SCALE_ATTACHER_QPS", "200")
	t.Setenv("FENCELINE_BENCH_SCALE_VICTIM_PODS", "20")
	if s, err = loadVAScaleSettings(); err != nil || !slices.Equal(s.VAs, []int{50000}) || s.AttacherBurst != 400 || s.VictimVAs != 20 {
		t.Fatalf("from the environment: %+v, %v", s, err)
	}
	for env, bad := range map[string]string{
		"FENCELINE_BENCH_SCALE_VAS":          "20", // not above the victim's
		"FENCELINE_BENCH_SCALE_VAS_PER_NODE": "0",
		"FENCELINE_BENCH_SCALE_ATTACHER_QPS": "fast",
		"FENCELINE_BENCH_SCALE_IDLE":         "1s",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			if _, err := loadVAScaleSettings(); err == nil || !strings.Contains(err.Error(), env) {
				t.Fatalf("%s=%s: error %v, want one naming the variable", env, bad, err)
			}
		})
	}
}

func TestScaleVolumeNodes(t *testing.T) {
	s := vaScaleSettings{VictimVAs: 2, VAsPerNode: 10}
	if got := vaNodes(s, 21); got != 3 {
		t.Fatalf("nodes for 21 VolumeAttachments at 10 a node = %d, want 3", got)
	}
	perNode := map[string]int{}
	for i := range 21 {
		perNode[scaleVolumeNode(s, 3, i)]++
	}
	want := map[string]int{scaleVictim: 2, fillerNode(0): 7, fillerNode(1): 6, fillerNode(2): 6}
	if !maps.Equal(perNode, want) {
		t.Fatalf("VolumeAttachments per node = %v, want %v", perNode, want)
	}
}

func TestFitLine(t *testing.T) {
	tests := []struct {
		name   string
		xs, ys []float64
		a, b   float64
	}{
		{"two points", []float64{0, 10}, []float64{5, 25}, 5, 2},
		{"on a line", []float64{5000, 20000, 50000}, []float64{110, 200, 380}, 80, 0.006},
		{"scattered", []float64{1, 2, 3}, []float64{1, 3, 2}, 1, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := fitLine(tc.xs, tc.ys)
			if math.Abs(a-tc.a) > 1e-9 || math.Abs(b-tc.b) > 1e-12 {
				t.Fatalf("fitLine = %v + %v x, want %v + %v x", a, b, tc.a, tc.b)
			}
		})
	}
	for _, bad := range [][2][]float64{{{1}, {1}}, {{2, 2}, {1, 3}}, {{1, 2}, {1}}} {
		if a, b := fitLine(bad[0], bad[1]); !math.IsNaN(a) || !math.IsNaN(b) {
			t.Errorf("fitLine(%v, %v) = %v, %v; want NaN", bad[0], bad[1], a, b)
		}
	}
}

func TestNewVAScaleReport(t *testing.T) {
	run := func(vas int, rss float64, fenced time.Duration) vaScaleRun {
		return vaScaleRun{VAs: vas, Nodes: vas / 10, VictimVAs: 100, Attach: time.Duration(vas/40) * time.Second, AttachRate: 40,
			AttachRequestsPerVA: 3, VAsFenced: fenced, VAsGone: fenced + 10*time.Millisecond,
			Attacher:   componentUsage{usage: usage{CPUPercent: 2, RSSMB: rss, PeakRSSMB: rss + 40}, HeapMB: rss / 2, HeapLiveMB: rss / 4, RequestsPerMin: 24, ReactionRequests: 330},
			Controller: componentUsage{usage: usage{RSSMB: rss / 2}},
			FenceAgent: componentUsage{usage: usage{RSSMB: 40}},
			Processes:  map[string]usage{"kube-apiserver": {CPUPercent: 50, RSSMB: 2000}}}
	}
	// Given out of order: sorted by count, fitted, the ratio largest over smallest.
	r := newVAScaleReport(vaScaleSettings{AttacherQPS: 100}, []vaScaleRun{
		run(50000, 380, 1200*time.Millisecond), run(5000, 110, time.Second), run(20000, 200, time.Second),
	})
	if f := r.Fits["attacher"]; math.Abs(f.BaseMB-80) > 1e-6 || math.Abs(f.PerTenThousandMB-60) > 1e-6 {
		t.Fatalf("attacher fit %+v, want 80 MB + 60 MB per 10,000", f)
	}
	if f := r.Fits["fence-agent"]; math.Abs(f.BaseMB-40) > 1e-6 || math.Abs(f.PerTenThousandMB) > 1e-6 {
		t.Fatalf("fence agent fit %+v, want a flat 40 MB", f)
	}
	if math.Abs(r.FencedRatio-1.2) > 1e-9 {
		t.Fatalf("fenced ratio %v, want 1.2", r.FencedRatio)
	}
	for _, want := range []string{"attacher at 50000 VolumeAttachments: RSS 380 MB, peak 420 MB, Go heap 190 MB (live 95 MB)",
		"attacher RSS, least squares over 3 runs: 80 MB + 60.0 MB per 10,000", "at 50000 / at 5000 VolumeAttachments: 1.2x"} {
		if !slices.ContainsFunc(r.Verdicts, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("verdicts %q lack %q", r.Verdicts, want)
		}
	}
	if i, j := strings.Index(r.Table, "5000 (500)"), strings.Index(r.Table, "50000 (5000)"); i < 0 || j < i {
		t.Errorf("table not sorted by count:\n%s", r.Table)
	}
	for _, want := range []string{"1.20 s", "3.3", "3.00", "420 MB", "95 MB"} {
		if !strings.Contains(r.Table, want) {
			t.Errorf("table lacks %q:\n%s", want, r.Table)
		}
	}
	if !strings.Contains(r.Context, "2000 MB") {
		t.Errorf("context lacks the API server's memory:\n%s", r.Context)
	}
	one := newVAScaleReport(vaScaleSettings{}, []vaScaleRun{run(5000, 110, time.Second)})
	if len(one.Fits) != 0 || one.FencedRatio != 1 || !strings.Contains(strings.Join(one.Verdicts, "\n"), "one count only") {
		t.Fatalf("one count: %+v", one)
	}
	if _, err := json.Marshal(one); err != nil {
		t.Fatalf("one count's report does not encode: %v", err)
	}
	if empty := newVAScaleReport(vaScaleSettings{}, nil); len(empty.Verdicts) != 0 {
		t.Fatalf("no runs: %+v", empty)
	}
}
