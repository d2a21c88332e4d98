package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// Settings come from flags (go test ./test/bench -args -reps=3) or, for
// `make bench`, from environment variables; a flag wins over the variable.
var (
	flagReps            = flag.Int("reps", 0, "failover repetitions per configuration (env FENCELINE_BENCH_REPS, default 5)")
	flagNoHumanReps     = flag.Int("nohuman-reps", 0, "repetitions of the no-human failover at production timings (env FENCELINE_BENCH_NOHUMAN_REPS, default 3)")
	flagPods            = flag.Int("pods", 0, "StatefulSet pods in the failover benchmark (env FENCELINE_BENCH_PODS, default 21)")
	flagVAs             = flag.Int("vas", 0, "VolumeAttachments in the throughput benchmark (env FENCELINE_BENCH_VAS, default 500)")
	flagWorkers         = flag.Int("worker-threads", 0, "--worker-threads of both attachers in the throughput benchmark (env FENCELINE_BENCH_WORKERS, default 10)")
	flagQPS             = flag.Int("kube-api-qps", 0, "--kube-api-qps of both attachers in the throughput benchmark (env FENCELINE_BENCH_QPS, default 50)")
	flagBurst           = flag.Int("kube-api-burst", 0, "--kube-api-burst of both attachers in the throughput benchmark (env FENCELINE_BENCH_BURST, default 100)")
	flagLatency         = flag.Duration("latency", 0, "the slow mock driver's latency per controller call (env FENCELINE_BENCH_LATENCY, default 50ms)")
	flagFailoverQPS     = flag.Int("failover-kube-api-qps", 0, "--kube-api-qps of both attachers in the failover benchmark; 0 keeps their default of 5 (env FENCELINE_BENCH_FAILOVER_QPS)")
	flagKCMQPS          = flag.Int("kcm-kube-api-qps", 0, "kube-controller-manager --kube-api-qps in the failover benchmark (burst twice that); 0 keeps its default of 20 (env FENCELINE_BENCH_KCM_QPS)")
	flagStorm           = flag.Int("storm", 0, "attaches and as many detaches of other volumes queued at the node's power-off in the storm benchmark (env FENCELINE_BENCH_STORM, default 500)")
	flagStormReps       = flag.Int("storm-reps", 0, "repetitions of the storm benchmark (env FENCELINE_BENCH_STORM_REPS, default 1)")
	flagAPILatency      = flag.Duration("api-latency", 0, "how late every API answer comes to Fenceline's components in the slow-API no-human benchmark (env FENCELINE_BENCH_API_LATENCY, default 2s)")
	flagQuarantineDelay = flag.Duration("quarantine-delay", 0, "fenceline-controller --quarantine-delay in the no-human run (env FENCELINE_BENCH_QUARANTINE_DELAY, default 5s)")
)

// settings are the resolved benchmark parameters.
type settings struct {
	Reps        int `json:"reps"`
	NoHumanReps int `json:"nohuman_reps"`
	Pods        int `json:"pods"`
	Storm       int `json:"storm"`
	StormReps   int `json:"storm_reps"`
	VAs         int `json:"vas"`
	Workers     int `json:"worker_threads"`
	QPS         int `json:"kube_api_qps"`
	Burst       int `json:"kube_api_burst"`
	FailoverQPS int `json:"failover_kube_api_qps,omitempty"`
	// KCMQPS raises kube-controller-manager's client rate limit in the
	// failover benchmark, to tell its share of the time from Fenceline's.
	KCMQPS          int           `json:"kcm_kube_api_qps,omitempty"`
	Latency         time.Duration `json:"latency_ns"`
	QuarantineDelay time.Duration `json:"quarantine_delay_ns"`
	APILatency      time.Duration `json:"api_latency_ns"`
	// UpstreamTaintEviction runs the no-human failover with
	// kube-controller-manager's taint-eviction-controller instead of
	// fenceline-controller's taint-eviction (env
	// FENCELINE_BENCH_UPSTREAM_TAINT_EVICTION=true).
	UpstreamTaintEviction bool `json:"upstream_taint_eviction"`
	// Configs limits the failover benchmark to these configurations
	// (comma-separated names, e.g. "F,F-auto"); empty runs all.
	Configs string `json:"configs,omitempty"`
}

// runs reports whether the failover configuration name is selected.
func (s settings) runs(name string) bool {
	return s.Configs == "" || slices.Contains(strings.Split(s.Configs, ","), name)
}

// loadSettings resolves every setting, failing on a malformed environment
// variable instead of silently using the default.
func loadSettings() (settings, error) {
	var s settings
	ints := []struct {
		dst       *int
		flag      int
		env       string
		def, low  int
		rationale string
	}{
		{&s.Reps, *flagReps, "FENCELINE_BENCH_REPS", 5, 1, "repetitions"},
		{&s.NoHumanReps, *flagNoHumanReps, "FENCELINE_BENCH_NOHUMAN_REPS", 3, 1, "repetitions"},
		{&s.Pods, *flagPods, "FENCELINE_BENCH_PODS", 21, 3, "pods (at least one per node)"},
		{&s.Storm, *flagStorm, "FENCELINE_BENCH_STORM", 500, 1, "VolumeAttachments"},
		{&s.StormReps, *flagStormReps, "FENCELINE_BENCH_STORM_REPS", 1, 1, "repetitions"},
		{&s.VAs, *flagVAs, "FENCELINE_BENCH_VAS", 500, 1, "VolumeAttachments"},
		{&s.Workers, *flagWorkers, "FENCELINE_BENCH_WORKERS", 10, 1, "worker threads"},
		{&s.QPS, *flagQPS, "FENCELINE_BENCH_QPS", 50, 1, "API QPS"},
		{&s.Burst, *flagBurst, "FENCELINE_BENCH_BURST", 100, 1, "API burst"},
		{&s.FailoverQPS, *flagFailoverQPS, "FENCELINE_BENCH_FAILOVER_QPS", 0, 0, "API QPS (0: attacher default)"},
		{&s.KCMQPS, *flagKCMQPS, "FENCELINE_BENCH_KCM_QPS", 0, 0, "API QPS (0: kube-controller-manager default)"},
	}
	for _, i := range ints {
		v, err := intSetting(i.flag, i.env, i.def)
		if err != nil {
			return s, err
		}
		if v < i.low {
			return s, fmt.Errorf("%s must be at least %d %s, got %d", i.env, i.low, i.rationale, v)
		}
		*i.dst = v
	}
	durs := []struct {
		dst  *time.Duration
		flag time.Duration
		env  string
		def  time.Duration
	}{
		{&s.Latency, *flagLatency, "FENCELINE_BENCH_LATENCY", 50 * time.Millisecond},
		{&s.QuarantineDelay, *flagQuarantineDelay, "FENCELINE_BENCH_QUARANTINE_DELAY", 5 * time.Second},
		{&s.APILatency, *flagAPILatency, "FENCELINE_BENCH_API_LATENCY", 2 * time.Second},
	}
	s.Configs = os.Getenv("FENCELINE_BENCH_CONFIGS")
	if v := os.Getenv("FENCELINE_BENCH_UPSTREAM_TAINT_EVICTION"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("FENCELINE_BENCH_UPSTREAM_TAINT_EVICTION: %w", err)
		}
		s.UpstreamTaintEviction = b
	}
	for _, d := range durs {
		v, err := durationSetting(d.flag, d.env, d.def)
		if err != nil {
			return s, err
		}
		*d.dst = v
	}
	return s, nil
}

func intSetting(flagVal int, env string, def int) (int, error) {
	if flagVal != 0 {
		return flagVal, nil
	}
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want an integer: %w", env, v, err)
	}
	return n, nil
}

func durationSetting(flagVal time.Duration, env string, def time.Duration) (time.Duration, error) {
	if flagVal != 0 {
		return flagVal, nil
	}
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration such as 50ms: %w", env, v, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s=%q: must not be negative", env, v)
	}
	return d, nil
}

// benchSetup skips under -short, checks the binaries the benchmarks need
// and resolves the settings.
func benchSetup(b *testing.B) settings {
	b.Helper()
	if testing.Short() {
		b.Skip("benchmark needs a control plane; skipped with -short")
	}
	for _, tool := range []string{"etcd", "kube-apiserver", upstreamAttacher} {
		if _, err := cluster.Tool(tool); err != nil {
			b.Fatalf("%v (run `make bench`, which builds it)", err)
		}
	}
	for _, bin := range []string{"fenceline-attacher", "mock-driver"} {
		if _, err := cluster.Binary(bin); err != nil {
			b.Fatal(err)
		}
	}
	s, err := loadSettings()
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// upstreamAttacher is the tool name of the upstream external-attacher
// binary, built by `make upstream-attacher`.
const upstreamAttacher = "csi-attacher"

// writeResult writes v as indented JSON to <repo>/bench-results/<name>.json
// and returns the path.
func writeResult(name string, v any) (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bench-results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
