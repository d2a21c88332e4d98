package chaos

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SmokeSeeds are the episodes `make test` runs: one per recovery path,
// with kills of the product and of the control plane among their faults,
// and 6037, node fencing of a flapping node run by the real kubelet
// (frozen, thawed, powered off by its BMC while frozen, booted again).
// Seeds of violations once found join RegressionSeeds.
var SmokeSeeds = []uint64{20, 27, 17, 6037}

// RegressionSeeds are episodes that once broke an invariant, one per
// cause; they run in `make test` too:
//   - 93: a flapping node put out of service and taken back twice by the
//     operator (the harness forgot the operator's first removal);
//   - 84: the mock driver killed: fenceline-attacher exits on the lost
//     socket, as upstream's does, and nothing restarted it;
//   - 38: a healed partition: the kubelet stand-in staged a volume the
//     attach/detach controller was detaching (the real kubelet waits for
//     node.status.volumesAttached);
//   - 2: a power cycle between the fence's verified Off and its write;
//   - 11: KWOK completing a graceful delete by name deleted the pod's
//     replacement (reported as not Fenceline's);
//   - 130: kube-apiserver killed while the harness flapped a node (its
//     own actions now retry);
//   - 2042: a fence admitted during a partition, slowed by its BMC, powers
//     the node off after the restore (the harness now boots such a node,
//     as its owner would);
//   - 3130: kube-apiserver killed while quarantine force-deleted pods: the
//     checker's informers re-listed after the restart and saw the node
//     only at its latest version, so a deletion was judged against a node
//     state from before the quarantine taint it followed (the history is
//     now read from etcd, every version of every object);
//   - 4430: a third party removed the fence intents that podgc wrote on a
//     power-cycled node's VolumeAttachments when the operator's
//     out-of-service taint landed; the node came back, no detach followed,
//     and fenceline-attacher wrote an intent back only in a detach, so a
//     restarted attacher would have found none (it now writes back at the
//     next sync of any attachment).
var RegressionSeeds = []uint64{93, 84, 38, 2, 11, 130, 2042, 3130, 4430}

// seeds is what TestChaos runs: FENCELINE_CHAOS_SEED (one, or a comma
// list) reruns exactly those; FENCELINE_CHAOS_EPISODES=n runs n seeds from
// FENCELINE_CHAOS_FIRST_SEED (default 1); neither runs the smoke and
// regression seeds.
func seeds(t *testing.T) []uint64 {
	if v := os.Getenv("FENCELINE_CHAOS_SEED"); v != "" {
		var out []uint64
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("FENCELINE_CHAOS_SEED=%q: %v", v, err)
			}
			out = append(out, n)
		}
		return out
	}
	if v := os.Getenv("FENCELINE_CHAOS_EPISODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCELINE_CHAOS_EPISODES=%q: want a positive number", v)
		}
		first := uint64(1)
		if f := os.Getenv("FENCELINE_CHAOS_FIRST_SEED"); f != "" {
			if first, err = strconv.ParseUint(f, 10, 64); err != nil {
				t.Fatalf("FENCELINE_CHAOS_FIRST_SEED=%q: %v", f, err)
			}
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = first + uint64(i)
		}
		return out
	}
	return append(append([]uint64(nil), SmokeSeeds...), RegressionSeeds...)
}

// parallel is how many episodes run at once (FENCELINE_CHAOS_PARALLEL,
// default 1).
func parallel(t *testing.T) int {
	v := os.Getenv("FENCELINE_CHAOS_PARALLEL")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FENCELINE_CHAOS_PARALLEL=%q: want a positive number", v)
	}
	return n
}

// TestChaos runs randomized episodes (see Draw) on the real local control
// plane and fails on any broken invariant, naming the seed that reruns it.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: needs a local control plane (not run with -short)")
	}
	start := time.Now()
	var (
		mu                 sync.Mutex
		results            []Result
		violations, broken int
	)
	slots := make(chan struct{}, parallel(t))
	t.Run("episodes", func(t *testing.T) {
		for _, seed := range seeds(t) {
			p := Draw(seed)
			p.NetworkFence = p.Recovery == NodeFencing && os.Getenv("FENCELINE_CHAOS_NETWORK_FENCE") == "1"
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				res, err := Run(t, p)
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
				if err != nil {
					mu.Lock()
					broken++
					mu.Unlock()
					t.Errorf("%s: the harness failed: %v\nrerun: make chaos SEED=%d", p, err, seed)
				}
				if len(res.Findings) > 0 {
					mu.Lock()
					violations++
					mu.Unlock()
					t.Errorf("%s: %d invariant violations:\n  %s\nrerun: make chaos SEED=%d", p, len(res.Findings), joinFindings(res.Findings), seed)
				}
				if len(res.Upstream) > 0 {
					t.Logf("%s: kube-controller-manager or KWOK, not Fenceline:\n  %s", p, joinFindings(res.Upstream))
				}
				t.Logf("%s: failover %.1fs, converged %.1fs after the restore, episode %.1fs, %d restarts; judged %s",
					p, res.Failover.Seconds(), res.Converged.Seconds(), res.Duration.Seconds(), res.Restarts, res.Judged)
			})
		}
	})
	t.Log(Summary(results, violations, broken, time.Since(start)))
}

func joinFindings(fs []Finding) string {
	s := make([]string, 0, len(fs))
	for _, f := range fs {
		s = append(s, f.String())
	}
	return strings.Join(s, "\n  ")
}

// TestChaosCatchesAPlainDetach shows that the checker is not vacuous: the
// same episode with upstream's csi-attacher in place of fenceline-attacher
// (an operator puts a partitioned, still-writing node out of service;
// upstream detaches without a fence) must be reported as two writers.
func TestChaosCatchesAPlainDetach(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: needs a local control plane (not run with -short)")
	}
	p := Plan{Seed: 0, Sets: []Set{{Name: "db0", Mode: "ReadWriteOnce"}}, Recovery: Operator,
		Failure: PartitionHeals, HealAfter: 40 * time.Second, Replicas: 1, UpstreamAttacher: true}
	res, err := Run(t, p)
	if err != nil {
		t.Logf("harness: %v", err)
	}
	rules := map[string]bool{}
	for _, f := range res.Findings {
		rules[f.Rule] = true
	}
	if !rules["never-two-writers"] || !rules["fence-required"] {
		t.Fatalf("findings %v; want never-two-writers and fence-required (judged %s)", res.Findings, res.Judged)
	}
}
