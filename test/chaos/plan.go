// Package chaos runs randomized failover episodes on the real local
// control plane and checks Fenceline's safety invariants over each: the
// mock driver's audit log (never two writers), the API history (nothing
// force-deleted without a trigger, FencingComplete only after a verified
// power-off, the operator's taints left alone) and the simulated BMCs'
// power logs (no healthy node fenced), then that everything converges
// once the faults stop.
//
// Every episode is drawn from a seed by Draw, a pure function, so that a
// failing seed reruns exactly: make chaos SEED=<seed>.
package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/world"
)

// Failure is how the episode's node(s) fail.
type Failure string

// The failures an episode draws from.
const (
	// PowerLoss cuts a node's power; it stays off until the faults stop.
	PowerLoss Failure = "power-loss"
	// PartitionHeals cuts a node off the control plane while it runs on
	// and writes; the partition heals after Plan.HealAfter.
	PartitionHeals Failure = "partition-heals"
	// PowerCycle cuts a node's power and boots it again after
	// Plan.HealAfter (a new boot ID).
	PowerCycle Failure = "power-cycle"
	// Flapping partitions and heals a node Plan.Flaps times, each cut
	// just long enough to be seen as a lost node.
	Flapping Failure = "flapping"
	// TwoNodes cuts the power of two nodes at once.
	TwoNodes Failure = "two-nodes"
)

// Recovery is what brings the workload back.
type Recovery string

// The recovery paths an episode draws from.
const (
	// NodeFencing: Fenceline's node-fencing powers the node off through
	// its BMC, verifies it, and puts it out of service. No human.
	NodeFencing Recovery = "node-fencing"
	// Operator: a human applies the out-of-service taint to every node
	// seen NotReady (even a partitioned one that still runs: the fenced
	// detach must make that safe), and removes it once the node is back.
	Operator Recovery = "operator"
	// SafeDetach: the driver is marked fenceline.io/safe-detach, and the
	// quarantine path moves the pods. No human.
	SafeDetach Recovery = "safe-detach"
)

// FaultKind is one kind of fault injected at a random moment.
type FaultKind string

// The faults an episode draws from.
const (
	KillAttacher          FaultKind = "kill-attacher"
	KillController        FaultKind = "kill-controller"
	KillFenceAgent        FaultKind = "kill-fence-agent"
	KillDriver            FaultKind = "kill-driver"
	KillControllerManager FaultKind = "kill-kube-controller-manager"
	KillAPIServer         FaultKind = "kill-kube-apiserver"
	// LeaderFailover kills the leading replica of two fenceline-controllers.
	LeaderFailover FaultKind = "leader-failover"
	// DriverErrors fails the next N ControllerUnpublishVolume calls.
	DriverErrors FaultKind = "driver-errors"
	// DriverLatency delays the next N controller publish/unpublish calls.
	DriverLatency FaultKind = "driver-latency"
	// DriverLostAnswers carries out the next N unpublishes and loses
	// their answers.
	DriverLostAnswers FaultKind = "driver-lost-answers"
	// BMCLatency slows every BMC for For.
	BMCLatency FaultKind = "bmc-latency"
	// BMCUnreachable makes the failed node's BMC unreachable for For.
	BMCUnreachable FaultKind = "bmc-unreachable"
	// PauseController stops fenceline-controller (SIGSTOP) for For: its
	// watches fall behind, then deliver late.
	PauseController FaultKind = "pause-controller"
	// AttacherDown kills fenceline-attacher and keeps it down for For, as
	// a pod that is rescheduled or pulls its image: others act meanwhile
	// (widened draws only).
	AttacherDown FaultKind = "attacher-down"
	// EditFenceAnnotations is a third party (an operator's kubectl, a
	// backup restore) removing fenceline.io/fence and
	// fenceline.io/fence-intent from every VolumeAttachment that carries
	// them, the first time one does from At on: fenceline-attacher must
	// write them back (adversarial draws only).
	EditFenceAnnotations FaultKind = "edit-fence-annotations"
	// APILatency holds every byte between one component (Fault.Component)
	// and kube-apiserver for Fault.Delay, both ways, for For: its requests
	// answer late and its watches deliver late (a proxy in front of
	// kube-apiserver; adversarial draws only).
	APILatency FaultKind = "api-latency"
	// AttacherLeaderFailover kills the leading replica of two
	// fenceline-attackers (SIGKILL: the Lease is not released); the
	// standby must take the Lease over once it expires and finish every
	// detach as decided, fenced ones fenced. The killed replica is
	// replaced at once, as a Deployment does (attacher replica draws
	// only).
	AttacherLeaderFailover FaultKind = "attacher-leader-failover"
)

// Component is a Fenceline component an APILatency fault slows.
type Component string

// The components whose API traffic a plan may delay.
const (
	AttacherComponent   Component = "attacher"
	ControllerComponent Component = "controller"
)

// maxAPILatency bounds an APILatency fault's delay.
const maxAPILatency = 5 * time.Second

// WidenedSeeds is the first seed whose plan draws from the widened fault
// set: components down for 1-30 s (AttacherDown), lasting faults up to
// 30 s. Seeds below it keep the plans they were recorded with, so that
// the regression seeds still replay what they found.
const WidenedSeeds = 1001

// AdversarialSeeds is the first seed whose plan also draws from the
// adversarial set: clocks off by 30 s (Plan.Skews), a third party editing
// Fenceline's annotations on VolumeAttachments, a BMC that reads Off while
// its node runs. Seeds below it draw exactly what they drew before it
// existed, widened ones included.
const AdversarialSeeds = 2001

// AttacherReplicaSeeds is the first seed whose plan may run two
// fenceline-attacher replicas with leader election (Plan.AttacherReplicas)
// and draw AttacherLeaderFailover. Seeds below it draw exactly what they
// drew before it existed.
const AttacherReplicaSeeds = 3001

// TwoDriverSeeds is the first seed whose plan may run two mock drivers at
// once (Plan.TwoDrivers), one safe-detach and the other not, with the
// StatefulSets spread over both and each driver or attacher fault aimed
// at one of them (Fault.Driver). Seeds below it draw exactly what they
// drew before it existed.
const TwoDriverSeeds = 4001

// TgtSeeds is the first seed whose plan may serve the first driver's
// volumes from a real iSCSI target (Plan.Tgt): the kubelet stand-ins then
// write stamped blocks through their own sessions, and each LUN's bytes
// are judged after the episode. Seeds below it draw exactly what they drew
// before it existed.
const TgtSeeds = 5001

// RealKubeletSeeds is the first seed whose plan may run the node of its
// workload on the real upstream kubelet (Plan.RealKubelet). Seeds below it
// draw exactly what they drew before it existed.
const RealKubeletSeeds = 6001

// RealNode is the real-kubelet node of a plan with Plan.RealKubelet, the
// fourth of its Nodes.
const RealNode = "real-d"

// SkewTarget is whose clock a Skew puts off.
type SkewTarget string

// The clocks a plan may skew.
const (
	// SkewFailedNode: the kubelet of the (first) node the episode fails
	// renews its Lease with a skewed renewTime.
	SkewFailedNode SkewTarget = "failed-node"
	// SkewHealthyNode: a node the episode never fails (one that runs a
	// pod of the workload when there is one) does.
	SkewHealthyNode SkewTarget = "healthy-node"
	// SkewAttacher: fenceline-attacher writes its heartbeat Lease with a
	// skewed renewTime (with two drivers, the safe-detach driver's
	// attacher: its heartbeat is quarantine's evidence).
	SkewAttacher SkewTarget = "attacher"
)

// nodeClockSkew is how far off a skewed clock runs: beyond every
// staleness bound of the episodes (the 4 s node Lease, the 5 s
// leaseStaleAfter of the fence policy).
const nodeClockSkew = 30 * time.Second

// Skew is a clock that runs off by By (negative: behind) for the whole
// episode: every renewTime its writer puts on its Lease is off by By.
type Skew struct {
	Of SkewTarget
	By time.Duration
}

func (s Skew) String() string { return fmt.Sprintf("%s%+ds", s.Of, int(s.By.Seconds())) }

// Fault is one fault of an episode.
type Fault struct {
	// At is when, from the failure.
	At   time.Duration
	Kind FaultKind
	// For is how long a lasting fault lasts.
	For time.Duration
	// N is how many calls a driver fault affects.
	N int
	// Component and Delay are an APILatency fault's component and delay.
	Component Component
	Delay     time.Duration
	// Driver is the CSI driver whose mock driver or fenceline-attacher a
	// driver or attacher fault hits in a plan of two drivers; "" is the
	// one (first) driver.
	Driver string
}

func (f Fault) String() string {
	s := string(f.Kind)
	if f.Driver != "" {
		s += "[" + driverShort(f.Driver) + "]"
	}
	s += fmt.Sprintf("@%.1fs", f.At.Seconds())
	if f.For > 0 {
		s += fmt.Sprintf("/%.1fs", f.For.Seconds())
	}
	if f.N > 0 {
		s += fmt.Sprintf("x%d", f.N)
	}
	if f.Component != "" {
		s += fmt.Sprintf("(%s+%.1fs)", f.Component, f.Delay.Seconds())
	}
	return s
}

// driver returns the CSI driver the fault hits.
func (f Fault) driver() string { return cmp.Or(f.Driver, world.DriverName) }

// Set is one StatefulSet of the workload (one replica).
type Set struct {
	Name string
	// Mode is the access mode of its PersistentVolume.
	Mode corev1.PersistentVolumeAccessMode
	// Driver is the CSI driver of its volume in a plan of two drivers;
	// "" is the one (first) driver.
	Driver string
}

// driver returns the CSI driver of the set's volume.
func (s Set) driver() string { return cmp.Or(s.Driver, world.DriverName) }

// Plan is one episode.
type Plan struct {
	Seed     uint64
	Sets     []Set
	Recovery Recovery
	Failure  Failure
	// HealAfter is when a partition heals or a power-cycled node boots.
	HealAfter time.Duration
	// Flaps is how many times a Flapping node is cut off.
	Flaps int
	// Replicas is the number of fenceline-controller replicas (2 with
	// leader election when the plan fails the leader over).
	Replicas int
	// AttacherReplicas is the number of fenceline-attacher replicas: 2
	// with leader election when the plan fails the attacher's leader over
	// (and one time in four otherwise, a standby through the other
	// faults), else 0, one attacher without leader election.
	AttacherReplicas int
	// TaintEviction runs Fenceline's taint-eviction in place of
	// kube-controller-manager's.
	TaintEviction bool
	// IPMI gives the nodes IPMI BMCs instead of Redfish ones.
	IPMI   bool
	Faults []Fault
	// Skews are the clocks that run off (adversarial draws only).
	Skews []Skew
	// LyingBMC makes the failed node's BMC the worst liar from before the
	// failure until the restore: it accepts a power-off, leaves the node
	// running and reads Off. Drawn only under node fencing, one time in
	// two where the node runs on (a partition, flapping) (adversarial
	// draws only).
	LyingBMC bool
	// UpstreamAttacher runs upstream's csi-attacher in place of
	// fenceline-attacher. Draw never sets it: the harness's own test
	// does, to show that the checker catches what Fenceline prevents.
	UpstreamAttacher bool
	// TwoDrivers runs a second mock driver, world.SecondDriverName, beside
	// the first, each with its own fenceline-attacher (AttacherReplicas
	// each): one is safe-detach and the other not (SafeDetachDriver). The
	// sets are spread over both (Set.Driver).
	TwoDrivers bool
	// Tgt, when set, runs the first mock driver on the tgt backend with
	// this fence method: every volume of it an iSCSI LUN on a real target,
	// judged on its bytes (world.CheckBytes) beside the audit log. Such an
	// episode needs root and Debian's tgt: without them it skips, or fails
	// with iscsi.RequireEnv set.
	Tgt tgt.FenceMethod
	// RealKubelet runs RealNode on the real upstream kubelet over a fake
	// container runtime (test/realkubelet) in place of a KWOK node with a
	// stand-in, and places the workload there, so that it is the node the
	// episode fails: a partition freezes its kubelet, a power loss kills
	// it and its runtime while the containers' writes go on. Never with
	// Tgt (its containers write through the array's data plane), nor with
	// a skew of the failed node's clock (the kubelet writes its own Lease).
	// Such an episode needs root and `make node-tools`: without them it
	// skips, or fails with FENCELINE_REQUIRE_REAL_KUBELET set.
	RealKubelet bool
	// NetworkFence adds the storage fence method NetworkFence to a node
	// fencing plan's policy (storageFence Required), on a world with
	// csi-addons network fencing (world.Options.NetworkFence). Draw never
	// sets it: FENCELINE_CHAOS_NETWORK_FENCE=1 does, for every drawn plan
	// under node fencing, so that the drawn seeds stay as they were.
	NetworkFence bool
}

// Drivers returns the CSI drivers the plan runs, the first one first.
func (p Plan) Drivers() []string {
	if p.TwoDrivers {
		return []string{world.DriverName, world.SecondDriverName}
	}
	return []string{world.DriverName}
}

// SafeDetachDriver reports whether driver's CSIDriver is annotated
// fenceline.io/safe-detach: the first driver exactly when the recovery is
// SafeDetach, as in a plan of one driver; the second the other way round,
// so that two drivers always mean one of each.
func (p Plan) SafeDetachDriver(driver string) bool {
	if driver == world.SecondDriverName {
		return p.Recovery != SafeDetach
	}
	return p.Recovery == SafeDetach
}

// Moves reports whether the recovery moves set s off a failed node before
// the failed nodes are back: with recovery safe-detach, only quarantine
// acts, and only for a safe-detach driver's volumes; the other driver's
// pods stay until the restore (or a healed partition) brings their node
// back.
func (p Plan) Moves(s Set) bool {
	return p.Recovery != SafeDetach || p.SafeDetachDriver(s.driver())
}

// Nodes is the number of nodes of every episode: enough for two to fail
// and two to take their pods.
const Nodes = 4

// faultWindow is when faults happen, from the failure: while detection,
// fencing and the move are under way.
const faultWindow = 25 * time.Second

// Draw returns the episode of seed. It is a pure function: the same seed
// gives the same plan on every machine.
func Draw(seed uint64) Plan {
	r := rand.New(rand.NewPCG(seed, 0x6368616f73)) // "chaos"
	p := Plan{Seed: seed, Replicas: 1}
	p.Recovery = pick(r, []Recovery{NodeFencing, NodeFencing, Operator, SafeDetach})
	p.Failure = pick(r, []Failure{PowerLoss, PartitionHeals, PowerCycle, Flapping, TwoNodes})
	p.HealAfter = time.Duration(2+r.IntN(28)) * time.Second
	if p.Failure == Flapping {
		p.Flaps = 2 + r.IntN(3)
	}
	for i := range 1 + r.IntN(3) {
		mode := corev1.ReadWriteOnce
		if i > 0 && r.IntN(4) == 0 {
			mode = corev1.ReadWriteMany
		}
		p.Sets = append(p.Sets, Set{Name: fmt.Sprintf("db%d", i), Mode: mode})
	}
	p.TaintEviction = r.IntN(3) == 0
	p.IPMI = p.Recovery == NodeFencing && r.IntN(3) == 0
	kinds := []FaultKind{KillAttacher, KillController, KillDriver, KillControllerManager, KillAPIServer,
		LeaderFailover, DriverErrors, DriverLatency, DriverLostAnswers, PauseController}
	if p.Recovery == NodeFencing {
		kinds = append(kinds, KillFenceAgent, KillFenceAgent, BMCLatency, BMCUnreachable)
	}
	widened := seed >= WidenedSeeds
	maxFor := 8
	if widened {
		kinds = append(kinds, AttacherDown, AttacherDown)
		maxFor = 30
	}
	adversarial := seed >= AdversarialSeeds
	if adversarial {
		kinds = append(kinds, EditFenceAnnotations, APILatency, APILatency)
	}
	attacherReplicas := seed >= AttacherReplicaSeeds
	if attacherReplicas {
		kinds = append(kinds, AttacherLeaderFailover, AttacherLeaderFailover)
	}
	for range r.IntN(4) {
		f := Fault{At: time.Duration(r.Int64N(int64(faultWindow))).Truncate(100 * time.Millisecond), Kind: pick(r, kinds)}
		switch f.Kind {
		case DriverErrors, DriverLatency, DriverLostAnswers:
			f.N = 1 + r.IntN(3)
		case BMCLatency, BMCUnreachable, PauseController, AttacherDown:
			f.For = time.Duration(1+r.IntN(maxFor)) * time.Second
		case APILatency:
			f.For = time.Duration(1+r.IntN(maxFor)) * time.Second
			f.Component = pick(r, []Component{AttacherComponent, ControllerComponent})
			f.Delay = time.Duration(r.Int64N(int64(maxAPILatency/(100*time.Millisecond))+1)) * 100 * time.Millisecond
		case LeaderFailover:
			p.Replicas = 2
		case AttacherLeaderFailover:
			p.AttacherReplicas = 2
		}
		p.Faults = append(p.Faults, f)
	}
	slices.SortStableFunc(p.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	if adversarial {
		// Drawn after everything else, so that the draws above stay
		// what they were for every seed.
		p.Skews = drawSkews(r)
		p.LyingBMC = p.Recovery == NodeFencing && (p.Failure == PartitionHeals || p.Failure == Flapping) && r.IntN(2) == 0
	}
	if attacherReplicas && p.AttacherReplicas == 0 && r.IntN(4) == 0 {
		// Drawn last, for the same reason: a standby replica through
		// kills, attacher-down, the third party's edits and latency.
		p.AttacherReplicas = 2
	}
	if seed >= TwoDriverSeeds && r.IntN(3) == 0 {
		// Drawn last too: every draw above stays what it was.
		p.drawSecondDriver(r)
	}
	if seed >= TgtSeeds && r.IntN(4) == 0 {
		// Drawn last, for the same reason.
		p.Tgt = pick(r, []tgt.FenceMethod{tgt.MethodACLSessions, tgt.MethodPR})
	}
	if seed >= RealKubeletSeeds && p.Tgt == "" && r.IntN(3) == 0 {
		// Drawn last, for the same reason.
		p.RealKubelet = true
		p.Skews = slices.DeleteFunc(p.Skews, func(k Skew) bool { return k.Of == SkewFailedNode })
	}
	return p
}

// driverFaults are the faults that hit one driver's mock driver or
// fenceline-attacher: in a plan of two drivers each picks one.
var driverFaults = []FaultKind{KillDriver, DriverErrors, DriverLatency, DriverLostAnswers,
	KillAttacher, AttacherDown, AttacherLeaderFailover}

// drawSecondDriver makes p a plan of two drivers: a second set when it
// had one (so that each driver has a volume), the sets alternating over
// the two drivers from a drawn first one, and each driver or attacher
// fault aimed at a drawn driver.
func (p *Plan) drawSecondDriver(r *rand.Rand) {
	p.TwoDrivers = true
	if len(p.Sets) == 1 {
		p.Sets = append(p.Sets, Set{Name: "db1", Mode: corev1.ReadWriteOnce})
	}
	drivers := p.Drivers()
	first := r.IntN(len(drivers))
	for i := range p.Sets {
		p.Sets[i].Driver = drivers[(first+i)%len(drivers)]
	}
	for i, f := range p.Faults {
		if slices.Contains(driverFaults, f.Kind) {
			p.Faults[i].Driver = pick(r, drivers)
		}
	}
}

// drawSkews draws the clocks of an adversarial plan that run off: a node's
// one time in two (the failed one or a healthy one), the attacher's one
// time in four, each 30 s behind or ahead.
func drawSkews(r *rand.Rand) []Skew {
	var out []Skew
	by := []time.Duration{-nodeClockSkew, nodeClockSkew}
	if r.IntN(2) == 0 {
		out = append(out, Skew{Of: pick(r, []SkewTarget{SkewFailedNode, SkewHealthyNode}), By: pick(r, by)})
	}
	if r.IntN(4) == 0 {
		out = append(out, Skew{Of: SkewAttacher, By: pick(r, by)})
	}
	return out
}

func pick[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

// String is the plan on one line, for reports.
func (p Plan) String() string {
	sets := make([]string, 0, len(p.Sets))
	for _, s := range p.Sets {
		set := s.Name + ":" + accessModeShort(s.Mode)
		if s.Driver != "" {
			set += "@" + driverShort(s.Driver)
		}
		sets = append(sets, set)
	}
	faults := make([]string, 0, len(p.Faults))
	for _, f := range p.Faults {
		faults = append(faults, f.String())
	}
	failure := string(p.Failure)
	switch p.Failure {
	case PartitionHeals, PowerCycle:
		failure += fmt.Sprintf("(%s)", p.HealAfter)
	case Flapping:
		failure += fmt.Sprintf("(x%d)", p.Flaps)
	}
	bmc := ""
	if p.Recovery == NodeFencing {
		bmc = map[bool]string{false: " bmc=redfish", true: " bmc=ipmi"}[p.IPMI]
	}
	if p.LyingBMC {
		bmc += "(reads-off-while-on)"
	}
	s := fmt.Sprintf("seed=%d recovery=%s%s failure=%s sets=%s replicas=%d taint-eviction=%t faults=[%s]",
		p.Seed, p.Recovery, bmc, failure, strings.Join(sets, ","), p.Replicas, p.TaintEviction, strings.Join(faults, " "))
	if p.AttacherReplicas > 1 {
		// Only plans with attacher replicas say so, as with skews below.
		s += fmt.Sprintf(" attacher-replicas=%d", p.AttacherReplicas)
	}
	if p.TwoDrivers {
		// Only plans of two drivers say so, and which is safe-detach.
		drivers := make([]string, 0, 2)
		for _, d := range p.Drivers() {
			drivers = append(drivers, driverShort(d)+map[bool]string{true: "(safe-detach)"}[p.SafeDetachDriver(d)])
		}
		s += fmt.Sprintf(" drivers=%s", strings.Join(drivers, ","))
	}
	if p.Tgt != "" {
		// Only plans on a real target say so.
		s += fmt.Sprintf(" storage=tgt(%s)", p.Tgt)
	}
	if p.RealKubelet {
		// Only plans with a real kubelet say so.
		s += " kubelet=real(" + RealNode + ")"
	}
	if p.NetworkFence {
		s += " storage-fence=NetworkFence"
	}
	if len(p.Skews) > 0 {
		// Only plans with skews say so: the others read as they always did.
		skews := make([]string, 0, len(p.Skews))
		for _, k := range p.Skews {
			skews = append(skews, k.String())
		}
		s += fmt.Sprintf(" skews=[%s]", strings.Join(skews, " "))
	}
	return s
}

// driverShort is a driver's name in a plan's description: "mock" for
// mock.fenceline.io.
func driverShort(driver string) string { return strings.TrimSuffix(driver, ".fenceline.io") }

func accessModeShort(m corev1.PersistentVolumeAccessMode) string {
	if m == corev1.ReadWriteMany {
		return "RWX"
	}
	return "RWO"
}
