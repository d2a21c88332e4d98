package bench

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The scale benchmark's settings, resolved like the others: a flag wins
// over its FENCELINE_BENCH_SCALE_* variable, a malformed value is an error.
var (
	flagScaleSizes      = flag.String("scale-sizes", "", "cluster sizes of the scale benchmark, NODESxPODS comma-separated (env FENCELINE_BENCH_SCALE_SIZES, default "+defaultScaleSizes+")")
	flagScaleVictimPods = flag.Int("scale-victim-pods", 0, "pods, each with its own RWO volume, on the node the scale benchmark loses (env FENCELINE_BENCH_SCALE_VICTIM_PODS, default 100)")
	flagScaleIdle       = flag.Duration("scale-idle", 0, "the window over which the scale benchmark measures CPU and API requests at rest (env FENCELINE_BENCH_SCALE_IDLE, default 60s)")
	flagScaleLease      = flag.Int("scale-lease-seconds", 0, "node Lease duration KWOK writes in the scale benchmark; renewed every quarter of it (env FENCELINE_BENCH_SCALE_LEASE_SECONDS, default 40, the kubelet's)")
	flagScaleQPS        = flag.Int("scale-kube-api-qps", 0, "--kube-api-qps of fenceline-attacher in the scale benchmark, burst twice that; 0 keeps its default of 5 (env FENCELINE_BENCH_SCALE_QPS)")
	// The attacher's scale benchmark (BenchmarkScaleAttacher).
	flagScaleVAs         = flag.String("scale-vas", "", "VolumeAttachment counts of the attacher's scale benchmark, comma-separated (env FENCELINE_BENCH_SCALE_VAS, default "+defaultScaleVAs+")")
	flagScaleVAsPerNode  = flag.Int("scale-vas-per-node", 0, "VolumeAttachments per node in the attacher's scale benchmark (env FENCELINE_BENCH_SCALE_VAS_PER_NODE, default 10)")
	flagScaleAttacherQPS = flag.Int("scale-attacher-qps", 0, "--kube-api-qps of fenceline-attacher in the attacher's scale benchmark, burst twice that (env FENCELINE_BENCH_SCALE_ATTACHER_QPS, default 100)")
)

// defaultScaleSizes are the sizes BenchmarkScale runs unless told otherwise.
const defaultScaleSizes = "500x1000,1000x5000,2000x20000,5000x50000"

// scaleSize is one cluster size: filler nodes and the pods spread over them.
type scaleSize struct {
	Nodes int `json:"nodes"`
	Pods  int `json:"pods"`
}

func (z scaleSize) String() string { return fmt.Sprintf("%dx%d", z.Nodes, z.Pods) }

// scaleSettings are the resolved parameters of BenchmarkScale.
type scaleSettings struct {
	Sizes      []scaleSize   `json:"sizes"`
	VictimPods int           `json:"victim_pods"`
	Idle       time.Duration `json:"idle_window_ns"`
	// LeaseSeconds is the node Lease duration of every KWOK node.
	LeaseSeconds int `json:"node_lease_seconds"`
	// AttacherQPS is fenceline-attacher's --kube-api-qps (burst twice
	// that); 0 leaves the attacher's defaults (5, burst 10).
	AttacherQPS int `json:"attacher_kube_api_qps,omitempty"`
}

// parseScaleSizes reads "500x1000,1000x5000": nodes, then pods, per size.
// Every size needs at least one node; pods may be zero.
func parseScaleSizes(v string) ([]scaleSize, error) {
	var out []scaleSize
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n, p, ok := strings.Cut(strings.ToLower(item), "x")
		if !ok {
			return nil, fmt.Errorf("size %q: want NODESxPODS, e.g. 500x1000", item)
		}
		nodes, err := strconv.Atoi(n)
		if err != nil || nodes < 1 {
			return nil, fmt.Errorf("size %q: nodes must be a positive integer", item)
		}
		pods, err := strconv.Atoi(p)
		if err != nil || pods < 0 {
			return nil, fmt.Errorf("size %q: pods must be a non-negative integer", item)
		}
		out = append(out, scaleSize{Nodes: nodes, Pods: pods})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no size in %q", v)
	}
	return out, nil
}

// loadScaleSettings resolves BenchmarkScale's settings.
func loadScaleSettings() (scaleSettings, error) {
	var s scaleSettings
	sizes := *flagScaleSizes
	if sizes == "" {
		sizes = os.Getenv("FENCELINE_BENCH_SCALE_SIZES")
	}
	if sizes == "" {
		sizes = defaultScaleSizes
	}
	var err error
	if s.Sizes, err = parseScaleSizes(sizes); err != nil {
		return s, fmt.Errorf("FENCELINE_BENCH_SCALE_SIZES: %w", err)
	}
	ints := []struct {
		dst       *int
		flag      int
		env       string
		def, low  int
		high      int
		rationale string
	}{
		{&s.VictimPods, *flagScaleVictimPods, "FENCELINE_BENCH_SCALE_VICTIM_PODS", 100, 1, 110, "pods (a node holds at most 110)"},
		// kube-controller-manager's grace period is 50 s: a Lease renewed
		// less often than every 30 s would make healthy nodes flap.
		{&s.LeaseSeconds, *flagScaleLease, "FENCELINE_BENCH_SCALE_LEASE_SECONDS", prodLeaseSeconds, 4, 120, "seconds of node Lease"},
		{&s.AttacherQPS, *flagScaleQPS, "FENCELINE_BENCH_SCALE_QPS", 0, 0, 1 << 20, "API QPS (0: attacher default)"},
	}
	for _, i := range ints {
		v, err := intSetting(i.flag, i.env, i.def)
		if err != nil {
			return s, err
		}
		if v < i.low || v > i.high {
			return s, fmt.Errorf("%s must be between %d and %d %s, got %d", i.env, i.low, i.high, i.rationale, v)
		}
		*i.dst = v
	}
	if s.Idle, err = durationSetting(*flagScaleIdle, "FENCELINE_BENCH_SCALE_IDLE", time.Minute); err != nil {
		return s, err
	}
	if s.Idle < 10*time.Second {
		return s, fmt.Errorf("FENCELINE_BENCH_SCALE_IDLE must be at least 10s, got %s", s.Idle)
	}
	return s, nil
}

// defaultScaleVAs are the VolumeAttachment counts BenchmarkScaleAttacher
// runs unless told otherwise: at 10 a node, the node counts of
// BenchmarkScale's sizes.
const defaultScaleVAs = "5000,20000,50000"

// vaScaleSettings are the resolved parameters of BenchmarkScaleAttacher.
type vaScaleSettings struct {
	// VAs are the VolumeAttachment counts, one fresh cluster each.
	VAs []int `json:"vas"`
	// VAsPerNode spreads them: a node per VAsPerNode VolumeAttachments.
	VAsPerNode int `json:"vas_per_node"`
	// VictimVAs of each count are on the node that loses power.
	VictimVAs int           `json:"victim_vas"`
	Idle      time.Duration `json:"idle_window_ns"`
	// LeaseSeconds is the node Lease duration of every KWOK node.
	LeaseSeconds int `json:"node_lease_seconds"`
	// AttacherQPS is fenceline-attacher's --kube-api-qps, AttacherBurst
	// its --kube-api-burst (twice that).
	AttacherQPS   int `json:"attacher_kube_api_qps"`
	AttacherBurst int `json:"attacher_kube_api_burst"`
}

// parseVACounts reads "5000,20000,50000"; each count must exceed victim,
// so that some VolumeAttachments are on nodes that stay up.
func parseVACounts(v string, victim int) ([]int, error) {
	var out []int
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n, err := strconv.Atoi(item)
		if err != nil || n <= victim {
			return nil, fmt.Errorf("count %q: want an integer above the %d on the lost node", item, victim)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no count in %q", v)
	}
	return out, nil
}

// loadVAScaleSettings resolves BenchmarkScaleAttacher's settings. The
// victim's volumes, the idle window and the node Lease come from the same
// variables as BenchmarkScale's.
func loadVAScaleSettings() (vaScaleSettings, error) {
	var s vaScaleSettings
	ints := []struct {
		dst       *int
		flag      int
		env       string
		def, low  int
		high      int
		rationale string
	}{
		{&s.VictimVAs, *flagScaleVictimPods, "FENCELINE_BENCH_SCALE_VICTIM_PODS", 100, 1, 110, "volumes (a node holds at most 110 pods)"},
		{&s.VAsPerNode, *flagScaleVAsPerNode, "FENCELINE_BENCH_SCALE_VAS_PER_NODE", 10, 1, 110, "VolumeAttachments per node"},
		{&s.LeaseSeconds, *flagScaleLease, "FENCELINE_BENCH_SCALE_LEASE_SECONDS", prodLeaseSeconds, 4, 120, "seconds of node Lease"},
		{&s.AttacherQPS, *flagScaleAttacherQPS, "FENCELINE_BENCH_SCALE_ATTACHER_QPS", 100, 1, 10000, "API QPS"},
	}
	for _, i := range ints {
		v, err := intSetting(i.flag, i.env, i.def)
		if err != nil {
			return s, err
		}
		if v < i.low || v > i.high {
			return s, fmt.Errorf("%s must be between %d and %d %s, got %d", i.env, i.low, i.high, i.rationale, v)
		}
		*i.dst = v
	}
	s.AttacherBurst = 2 * s.AttacherQPS
	counts := *flagScaleVAs
	if counts == "" {
		counts = os.Getenv("FENCELINE_BENCH_SCALE_VAS")
	}
	if counts == "" {
		counts = defaultScaleVAs
	}
	var err error
	if s.VAs, err = parseVACounts(counts, s.VictimVAs); err != nil {
		return s, fmt.Errorf("FENCELINE_BENCH_SCALE_VAS: %w", err)
	}
	if s.Idle, err = durationSetting(*flagScaleIdle, "FENCELINE_BENCH_SCALE_IDLE", time.Minute); err != nil {
		return s, err
	}
	if s.Idle < 10*time.Second {
		return s, fmt.Errorf("FENCELINE_BENCH_SCALE_IDLE must be at least 10s, got %s", s.Idle)
	}
	return s, nil
}
