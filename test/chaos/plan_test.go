package chaos

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/world"
)

func TestDrawIsDeterministic(t *testing.T) {
	for seed := range uint64(200) {
		if a, b := Draw(seed), Draw(seed); !reflect.DeepEqual(a, b) {
			t.Fatalf("Draw(%d) twice: %v and %v", seed, a, b)
		}
	}
	if reflect.DeepEqual(Draw(1).Faults, Draw(2).Faults) && Draw(1).Failure == Draw(2).Failure && Draw(1).Recovery == Draw(2).Recovery {
		t.Errorf("seeds 1 and 2 drew the same episode: %v", Draw(1))
	}
}

// TestDrawCoversAndIsConsistent checks over many seeds that every failure,
// recovery and fault comes up, and that no plan asks for what its world
// lacks (a BMC fault without BMCs, a leader fail-over with one replica).
func TestDrawCoversAndIsConsistent(t *testing.T) {
	failures, recoveries, kinds := map[Failure]bool{}, map[Recovery]bool{}, map[FaultKind]bool{}
	rwx, ipmi, eviction := false, false, false
	skews := map[SkewTarget]bool{}
	lying := false
	for seed := range uint64(2 * AdversarialSeeds) {
		p := Draw(seed)
		failures[p.Failure], recoveries[p.Recovery] = true, true
		// A lie matters only while the node runs on, and only a fence
		// through the BMC hears it.
		if p.LyingBMC && (p.Recovery != NodeFencing || (p.Failure != PartitionHeals && p.Failure != Flapping)) {
			t.Fatalf("seed %d: a lying BMC without node fencing of a node that runs on: %v", seed, p)
		}
		lying = lying || p.LyingBMC
		for _, s := range p.Skews {
			skews[s.Of] = true
			if s.By != nodeClockSkew && s.By != -nodeClockSkew {
				t.Fatalf("seed %d: skew %s, want 30 s either way", seed, s)
			}
		}
		ipmi, eviction = ipmi || p.IPMI, eviction || p.TaintEviction
		if len(p.Sets) == 0 || p.Sets[0].Mode != "ReadWriteOnce" {
			t.Fatalf("seed %d: the first set must be ReadWriteOnce (the failover judged): %v", seed, p)
		}
		for _, s := range p.Sets {
			rwx = rwx || s.Mode == "ReadWriteMany"
		}
		if !slices.IsSortedFunc(p.Faults, func(a, b Fault) int { return int(a.At - b.At) }) {
			t.Fatalf("seed %d: faults not in time order: %v", seed, p)
		}
		for _, f := range p.Faults {
			kinds[f.Kind] = true
			if f.At < 0 || f.At >= faultWindow {
				t.Fatalf("seed %d: fault %s outside [0, %s)", seed, f, faultWindow)
			}
			switch f.Kind {
			case KillFenceAgent, BMCLatency, BMCUnreachable:
				if p.Recovery != NodeFencing {
					t.Fatalf("seed %d: %s without node fencing: %v", seed, f.Kind, p)
				}
			case LeaderFailover:
				if p.Replicas != 2 {
					t.Fatalf("seed %d: leader fail-over with %d replica(s)", seed, p.Replicas)
				}
			case AttacherLeaderFailover:
				if p.AttacherReplicas != 2 {
					t.Fatalf("seed %d: attacher leader fail-over with %d attacher replica(s)", seed, p.AttacherReplicas)
				}
			case APILatency:
				if f.Delay < 0 || f.Delay > maxAPILatency || f.For <= 0 || (f.Component != AttacherComponent && f.Component != ControllerComponent) {
					t.Fatalf("seed %d: %s: want a delay of 0-5 s of the attacher or the controller, for a while", seed, f)
				}
			}
		}
	}
	for _, f := range []Failure{PowerLoss, PartitionHeals, PowerCycle, Flapping, TwoNodes} {
		if !failures[f] {
			t.Errorf("failure %s never drawn", f)
		}
	}
	for _, r := range []Recovery{NodeFencing, Operator, SafeDetach} {
		if !recoveries[r] {
			t.Errorf("recovery %s never drawn", r)
		}
	}
	for _, k := range []FaultKind{KillAttacher, KillController, KillFenceAgent, KillDriver, KillControllerManager, KillAPIServer,
		LeaderFailover, DriverErrors, DriverLatency, DriverLostAnswers, BMCLatency, BMCUnreachable, PauseController, AttacherDown,
		EditFenceAnnotations, APILatency, AttacherLeaderFailover} {
		if !kinds[k] {
			t.Errorf("fault %s never drawn", k)
		}
	}
	for _, s := range []SkewTarget{SkewFailedNode, SkewHealthyNode, SkewAttacher} {
		if !skews[s] {
			t.Errorf("skew of the %s never drawn", s)
		}
	}
	if !rwx || !ipmi || !eviction || !lying {
		t.Errorf("RWX %t, IPMI %t, taint eviction %t, lying BMC %t: each must come up", rwx, ipmi, eviction, lying)
	}
}

// TestSmokeSeedsCoverEveryRecovery keeps `make test`'s short subset
// meaningful: every recovery path, and a kill of the control plane.
func TestSmokeSeedsCoverEveryRecovery(t *testing.T) {
	recoveries := map[Recovery]bool{}
	controlPlane := false
	for _, s := range SmokeSeeds {
		p := Draw(s)
		t.Log(p)
		recoveries[p.Recovery] = true
		for _, f := range p.Faults {
			controlPlane = controlPlane || f.Kind == KillAPIServer || f.Kind == KillControllerManager
		}
	}
	if len(recoveries) != 3 || !controlPlane {
		t.Errorf("smoke seeds cover %v, control-plane kill %t; want all three recoveries and a kill", recoveries, controlPlane)
	}
}

// TestWidenedDrawKeepsRecordedSeeds: seeds below WidenedSeeds draw exactly
// what they drew before the widened faults existed (no AttacherDown, no
// lasting fault over 8 s), so the regression seeds replay their findings;
// widened seeds draw components down for up to 30 s.
func TestWidenedDrawKeepsRecordedSeeds(t *testing.T) {
	long := false
	for seed := range uint64(2 * WidenedSeeds) {
		for _, f := range Draw(seed).Faults {
			old := seed < WidenedSeeds
			switch {
			case old && (f.Kind == AttacherDown || f.For > 8*time.Second):
				t.Fatalf("seed %d below %d drew the widened fault %s", seed, WidenedSeeds, f)
			case f.For > 30*time.Second:
				t.Fatalf("seed %d: fault %s lasts over 30 s", seed, f)
			case !old && f.For > 8*time.Second:
				long = true
			}
		}
	}
	if !long {
		t.Errorf("no widened seed drew a fault lasting over 8 s")
	}
}

// recordedPlans is the SHA-256 of the plans of seeds 0 to
// AdversarialSeeds-1 (each Plan.String and HealAfter on a line) as they were
// drawn before the adversarial draws existed: the seeds of the widened
// 200-episode run (1001-1200) among them.
const recordedPlans = "860ff841239ab0234930963da7e59c6e84304a36be7c5e4cf94ebaf611b40be2"

// TestAdversarialDrawKeepsRecordedSeeds: every seed below AdversarialSeeds
// draws exactly the plan it drew before (the digest of all of them), with
// no skew and no adversarial fault; seeds from it draw each of them.
func TestAdversarialDrawKeepsRecordedSeeds(t *testing.T) {
	h := sha256.New()
	for seed := range uint64(AdversarialSeeds) {
		p := Draw(seed)
		fmt.Fprintln(h, p.String(), p.HealAfter)
		if len(p.Skews) > 0 || p.LyingBMC {
			t.Fatalf("seed %d below %d drew skews %v or a lying BMC", seed, AdversarialSeeds, p.Skews)
		}
		for _, f := range p.Faults {
			if f.Kind == EditFenceAnnotations || f.Kind == APILatency {
				t.Fatalf("seed %d below %d drew the adversarial fault %s", seed, AdversarialSeeds, f)
			}
		}
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != recordedPlans {
		t.Fatalf("the plans of seeds below %d changed: digest %s, recorded %s", AdversarialSeeds, got, recordedPlans)
	}
	adversarial := 0
	for seed := uint64(AdversarialSeeds); seed < AdversarialSeeds+200; seed++ {
		p := Draw(seed)
		if len(p.Skews) > 0 || p.LyingBMC || slices.ContainsFunc(p.Faults, func(f Fault) bool {
			return f.Kind == EditFenceAnnotations || f.Kind == APILatency
		}) {
			adversarial++
		}
	}
	if adversarial < 50 {
		t.Errorf("only %d of 200 adversarial seeds drew a skew or an adversarial fault", adversarial)
	}
}

// recordedAdversarialPlans is the SHA-256 of the plans of seeds
// AdversarialSeeds to AttacherReplicaSeeds-1 (as recordedPlans) as they
// were drawn before attacher replicas existed.
const recordedAdversarialPlans = "71d1404a8ddbacd85396cedbf918e455111e0bc4e95696da005e76404818439e"

// TestAttacherReplicaDrawKeepsRecordedSeeds: every seed below
// AttacherReplicaSeeds draws exactly the plan it drew before (the digest
// of the adversarial ones; TestAdversarialDrawKeepsRecordedSeeds covers
// the older), with one attacher and no attacher fail-over; seeds from it
// draw both a fail-over and a standby without one.
func TestAttacherReplicaDrawKeepsRecordedSeeds(t *testing.T) {
	checkRecordedDraws(t, AdversarialSeeds, AttacherReplicaSeeds, recordedAdversarialPlans, "attacher replicas", func(p Plan) bool {
		return p.AttacherReplicas != 0 || slices.ContainsFunc(p.Faults, func(f Fault) bool { return f.Kind == AttacherLeaderFailover })
	})
	failovers, standbys := 0, 0
	for seed := uint64(AttacherReplicaSeeds); seed < AttacherReplicaSeeds+200; seed++ {
		p := Draw(seed)
		switch {
		case slices.ContainsFunc(p.Faults, func(f Fault) bool { return f.Kind == AttacherLeaderFailover }):
			failovers++
		case p.AttacherReplicas == 2:
			standbys++
		case p.AttacherReplicas != 0:
			t.Fatalf("seed %d: %d attacher replicas, want 0 or 2", seed, p.AttacherReplicas)
		}
		if p.AttacherReplicas == 2 && !strings.Contains(p.String(), " attacher-replicas=2") {
			t.Fatalf("seed %d: the plan does not say it runs two attachers: %s", seed, p)
		}
	}
	if failovers < 10 || standbys < 10 {
		t.Errorf("of 200 attacher replica seeds %d drew a fail-over and %d a standby without one; want 10 or more each", failovers, standbys)
	}
}

// recordedAttacherReplicaPlans is the SHA-256 of the plans of seeds
// AttacherReplicaSeeds to TwoDriverSeeds-1 (as recordedPlans) as they were
// drawn before plans of two drivers existed.
const recordedAttacherReplicaPlans = "73266a00cc5954f1eeb88489427f7f57777e72214ab72d24f23a558984de61a9"

// TestTwoDriverDrawKeepsRecordedSeeds: every seed below TwoDriverSeeds
// draws exactly the plan it drew before (the digest of the attacher replica
// ones; the tests above cover the older), with one driver; seeds from it
// draw plans of two drivers, each with a set on either driver, one driver
// safe-detach and the other not, and driver and attacher faults aimed at
// either, all said in the plan's description.
func TestTwoDriverDrawKeepsRecordedSeeds(t *testing.T) {
	checkRecordedDraws(t, AttacherReplicaSeeds, TwoDriverSeeds, recordedAttacherReplicaPlans, "two drivers", func(p Plan) bool {
		return p.TwoDrivers || slices.ContainsFunc(p.Sets, func(s Set) bool { return s.Driver != "" }) ||
			slices.ContainsFunc(p.Faults, func(f Fault) bool { return f.Driver != "" })
	})
	two, aimed := 0, map[string]bool{}
	for seed := uint64(TwoDriverSeeds); seed < TwoDriverSeeds+300; seed++ {
		p := Draw(seed)
		if !p.TwoDrivers {
			continue
		}
		two++
		if !strings.Contains(p.String(), " drivers=") {
			t.Fatalf("seed %d: the plan does not say it runs two drivers: %s", seed, p)
		}
		if p.SafeDetachDriver(world.DriverName) == p.SafeDetachDriver(world.SecondDriverName) {
			t.Fatalf("seed %d: both drivers safe-detach or neither: %s", seed, p)
		}
		on := map[string]bool{}
		for _, s := range p.Sets {
			on[s.Driver] = true
			if !strings.Contains(p.String(), s.Name+":"+accessModeShort(s.Mode)+"@"+driverShort(s.Driver)) {
				t.Fatalf("seed %d: the description does not say set %s is on %s: %s", seed, s.Name, s.Driver, p)
			}
		}
		if !on[world.DriverName] || !on[world.SecondDriverName] {
			t.Fatalf("seed %d: a driver without a set: %s", seed, p)
		}
		for _, f := range p.Faults {
			switch {
			case slices.Contains(driverFaults, f.Kind) && f.Driver == "":
				t.Fatalf("seed %d: %s aimed at no driver: %s", seed, f, p)
			case !slices.Contains(driverFaults, f.Kind) && f.Driver != "":
				t.Fatalf("seed %d: %s aimed at a driver: %s", seed, f, p)
			case f.Driver != "":
				aimed[f.Driver] = true
				if !strings.Contains(f.String(), "["+driverShort(f.Driver)+"]") {
					t.Fatalf("seed %d: %s does not name its driver", seed, f)
				}
			}
		}
	}
	if two < 50 || !aimed[world.DriverName] || !aimed[world.SecondDriverName] {
		t.Errorf("of 300 two-driver seeds %d drew two drivers (want 50 or more), faults aimed at %v (want both)", two, aimed)
	}
}

// TestMovesOnlyWhatTheRecoveryMoves: with recovery safe-detach only the
// safe-detach driver's sets move before the restore; the other recoveries
// move every set.
func TestMovesOnlyWhatTheRecoveryMoves(t *testing.T) {
	first, second := Set{Name: "db0", Mode: "ReadWriteOnce"}, Set{Name: "db1", Mode: "ReadWriteOnce", Driver: world.SecondDriverName}
	for _, tc := range []struct {
		recovery              Recovery
		twoDrivers            bool
		wantFirst, wantSecond bool
		firstSafe, secondSafe bool
	}{
		{recovery: SafeDetach, wantFirst: true, firstSafe: true},
		{recovery: SafeDetach, twoDrivers: true, wantFirst: true, firstSafe: true},
		{recovery: NodeFencing, twoDrivers: true, wantFirst: true, wantSecond: true, secondSafe: true},
		{recovery: Operator, twoDrivers: true, wantFirst: true, wantSecond: true, secondSafe: true},
		{recovery: Operator, wantFirst: true},
	} {
		p := Plan{Recovery: tc.recovery, TwoDrivers: tc.twoDrivers}
		if got := p.Moves(first); got != tc.wantFirst {
			t.Errorf("%s (two drivers %t): Moves(first driver's set) = %t, want %t", tc.recovery, tc.twoDrivers, got, tc.wantFirst)
		}
		if !tc.twoDrivers {
			continue
		}
		if got := p.Moves(second); got != tc.wantSecond {
			t.Errorf("%s: Moves(second driver's set) = %t, want %t", tc.recovery, got, tc.wantSecond)
		}
		if p.SafeDetachDriver(world.DriverName) != tc.firstSafe || p.SafeDetachDriver(world.SecondDriverName) != tc.secondSafe {
			t.Errorf("%s: safe-detach first %t second %t, want %t and %t", tc.recovery,
				p.SafeDetachDriver(world.DriverName), p.SafeDetachDriver(world.SecondDriverName), tc.firstSafe, tc.secondSafe)
		}
	}
}

// recordedTwoDriverPlans is the SHA-256 of the plans of seeds
// TwoDriverSeeds to TgtSeeds-1 (as recordedPlans) as they were drawn
// before plans on a real iSCSI target existed.
const recordedTwoDriverPlans = "50956f8ede83bb6c22977f0fa6eef860b066f124c93afa3cf0818a62740cd069"

// TestTgtDrawKeepsRecordedSeeds: every seed below TgtSeeds draws exactly
// the plan it drew before, on the memory backend; from it about one plan
// in four serves the first driver from a real target, with either fence
// method that is one, and says so.
func TestTgtDrawKeepsRecordedSeeds(t *testing.T) {
	checkRecordedDraws(t, TwoDriverSeeds, TgtSeeds, recordedTwoDriverPlans, "the tgt backend", func(p Plan) bool { return p.Tgt != "" })
	methods := map[tgt.FenceMethod]int{}
	for seed := uint64(TgtSeeds); seed < TgtSeeds+400; seed++ {
		p := Draw(seed)
		if p.Tgt == "" {
			continue
		}
		methods[p.Tgt]++
		if p.Tgt == tgt.MethodACL {
			t.Fatalf("seed %d drew acl, which is no fence: %s", seed, p)
		}
		if !strings.Contains(p.String(), " storage=tgt("+string(p.Tgt)+")") {
			t.Fatalf("seed %d: the plan does not say it runs on the target: %s", seed, p)
		}
	}
	if n := methods[tgt.MethodACLSessions] + methods[tgt.MethodPR]; n < 70 || n > 130 || methods[tgt.MethodPR] == 0 || methods[tgt.MethodACLSessions] == 0 {
		t.Errorf("of 400 seeds from %d, the tgt draws were %v: want about a quarter, both methods", TgtSeeds, methods)
	}
}

// checkRecordedDraws fails t when a seed below next drew what next
// introduced (drew reports it, what names it), or when the plans of seeds
// from to next-1 no longer hash to digest, the SHA-256 they had when next
// was added.
func checkRecordedDraws(t *testing.T, from, next uint64, digest, what string, drew func(Plan) bool) {
	t.Helper()
	h := sha256.New()
	for seed := range next {
		p := Draw(seed)
		if seed >= from {
			fmt.Fprintln(h, p.String(), p.HealAfter)
		}
		if drew(p) {
			t.Fatalf("seed %d below %d drew %s: %v", seed, next, what, p)
		}
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != digest {
		t.Fatalf("the plans of seeds %d to %d changed: digest %s, recorded %s", from, next-1, got, digest)
	}
}

// recordedTgtPlans is the SHA-256 of the plans of seeds TgtSeeds to
// RealKubeletSeeds-1 (as recordedPlans) as they were drawn before plans
// with a real kubelet existed.
const recordedTgtPlans = "e3877e140160ef1a2da77cd256e3ceb92183a28a31723a4aa674c591cfffdd98"

// TestRealKubeletDrawKeepsRecordedSeeds: every seed below
// RealKubeletSeeds draws exactly the plan it drew before, with stand-ins
// only; from it about one plan in four runs the workload's node on a real
// kubelet, never on the tgt backend nor with the failed node's clock
// skewed, and says so.
func TestRealKubeletDrawKeepsRecordedSeeds(t *testing.T) {
	checkRecordedDraws(t, TgtSeeds, RealKubeletSeeds, recordedTgtPlans, "a real kubelet", func(p Plan) bool { return p.RealKubelet })
	real, failures := 0, map[Failure]int{}
	for seed := uint64(RealKubeletSeeds); seed < RealKubeletSeeds+400; seed++ {
		p := Draw(seed)
		if !p.RealKubelet {
			continue
		}
		real++
		failures[p.Failure]++
		if p.Tgt != "" {
			t.Fatalf("seed %d drew a real kubelet on the tgt backend: %s", seed, p)
		}
		if slices.ContainsFunc(p.Skews, func(k Skew) bool { return k.Of == SkewFailedNode }) {
			t.Fatalf("seed %d skews the clock of the real kubelet's node: %s", seed, p)
		}
		if !strings.Contains(p.String(), " kubelet=real("+RealNode+")") {
			t.Fatalf("seed %d: the plan does not say it runs a real kubelet: %s", seed, p)
		}
	}
	if real < 70 || real > 130 || len(failures) != 5 {
		t.Errorf("of 400 seeds from %d, %d drew a real kubelet, with failures %v: want about a quarter, every failure", RealKubeletSeeds, real, failures)
	}
}
