package nodefencing

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

// propNow is the instant of the random inputs.
var propNow = testobj.Epoch.Add(time.Hour)

// pick returns one of the values.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// randomNode draws node n1, nil one time in eight: Ready, NotReady or
// Unknown since up to two minutes ago, sometimes recreated (another UID)
// or labelled out of fencing, with boot ID boot-1, boot-2 or none, an
// out-of-service taint under any effect, an owner annotation naming the
// request, another request or nothing, and volumes in use.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(8) == 0 {
		return nil
	}
	since := propNow.Add(-time.Duration(r.IntN(120000)) * time.Millisecond)
	opts := []testobj.NodeOption{
		pick(r, testobj.ReadySince(since), testobj.NotReadySince(since), testobj.UnknownSince(since)),
		testobj.BootID(pick(r, "boot-1", "boot-2", "boot-2", "")),
	}
	if r.IntN(6) == 0 {
		opts = append(opts, testobj.NodeUID("uid-n1-new"))
	}
	if r.IntN(10) == 0 {
		opts = append(opts, testobj.Label(detect.ExcludeLabel, ""))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.TaintAt(names.OutOfServiceTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule), since))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.Annotation(names.OutOfServiceOwnerAnnotation, pick(r, "uid-req-n1", "uid-req-other", "")))
	}
	if r.IntN(5) == 0 {
		opts = append(opts, testobj.VolumesInUse("kubernetes.io/csi/disk^v1"))
	}
	return testobj.Node("n1", opts...)
}

// randomPolicy draws the node's FencePolicy, nil one time in six, with
// manual approval or unfencing, no out-of-service taint, a healthy delay,
// maxAttempts and one or two levels (one of them sometimes empty).
func randomPolicy(r *rand.Rand) *fencingv1alpha1.FencePolicy {
	if r.IntN(6) == 0 {
		return nil
	}
	var opts []testobj.PolicyOption
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.ManualApproval())
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.NoOutOfServiceTaint())
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.ManualUnfence())
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.HealthyDelay(time.Duration(r.IntN(60))*time.Second))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.MaxAttempts(int32(r.IntN(4))))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.PowerCheck(fencingv1alpha1.PowerCheckNever))
	}
	switch r.IntN(3) {
	case 0:
		opts = append(opts, testobj.Levels(testobj.FenceLevel(1, "bmc"), testobj.FenceLevel(2, "pdu-a", "pdu-b")))
	case 1:
		opts = append(opts, testobj.Levels(testobj.FenceLevel(1), testobj.FenceLevel(2, "pdu-a")))
	}
	return testobj.FencePolicy("p", opts...)
}

// randomRequest draws the node's open request, nil one time in four, in
// any phase (terminal ones too), automatic or manual, approved or not,
// bound to n1's UID, to none or to another, with a boot ID at fence time,
// failed rounds and fence attempts of any level, class, result and power
// state read back.
func randomRequest(r *rand.Rand) *fencingv1alpha1.FencingRequest {
	if r.IntN(4) == 0 {
		return nil
	}
	opts := []testobj.RequestOption{
		testobj.InPhase(pick(r, "", pending, triaged, fencing, fencing, fenced, fenced, recovering, recovering,
			fencingv1alpha1.FencingPhaseRecovered, fencingv1alpha1.FencingPhaseFailed, fencingv1alpha1.FencingPhaseCancelled)),
		testobj.BootIDAtFence(pick(r, "boot-1", "boot-1", "boot-2", "")),
		testobj.FailedRounds(int32(r.IntN(7))),
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.ByUser("ada"))
	}
	if r.IntN(2) == 0 {
		opts = append(opts, testobj.Approved(r.IntN(2) == 0))
	}
	if r.IntN(6) == 0 {
		opts = append(opts, testobj.ForNodeUID(pick[types.UID](r, "", "uid-n1-new")))
	}
	var as []fencingv1alpha1.FenceAttempt
	for range r.IntN(4) {
		as = append(as, testobj.FenceAttempt(int32(1+r.IntN(2)), pick(r, "bmc", "pdu-a", "pdu-b"),
			pick(r, succeeded, fencingv1alpha1.FenceAttemptFailed, fencingv1alpha1.FenceAttemptTimedOut),
			pick(r, off, fencingv1alpha1.PowerStateOn, "")))
	}
	return testobj.FencingRequest("n1", append(opts, testobj.Attempts(as...))...)
}

// randomTarget draws the node's FenceTarget: a power check asked and
// answered for the Lease's renewal, for another one, or not at all.
func randomTarget(r *rand.Rand, lease *coordinationv1.Lease) *fencingv1alpha1.FenceTarget {
	tokens := []string{"", detect.PowerCheckToken(lease), "uid-old/1"}
	var opts []testobj.TargetOption
	if ask := pick(r, tokens...); ask != "" {
		opts = append(opts, testobj.PowerCheckAsked(ask))
	}
	if answer := pick(r, tokens...); answer != "" {
		opts = append(opts, testobj.PowerCheckAnswered(answer, pick(r, off, off, fencingv1alpha1.PowerStateOn, fencingv1alpha1.PowerStateUnknown)))
	}
	return testobj.FenceTarget("n1", opts...)
}

// randomInput draws every input of Decide.
func randomInput(r *rand.Rand) Input {
	in := Input{Node: randomNode(r), Policy: randomPolicy(r), Request: randomRequest(r), VolumeAttachments: max(0, r.IntN(4)-2), Now: propNow}
	if r.IntN(4) > 0 {
		in.Lease = testobj.Lease("n1", propNow.Add(-time.Duration(r.IntN(90000))*time.Millisecond))
		in = seenAtRenewal(in)
	}
	if r.IntN(3) > 0 {
		in.Target = randomTarget(r, in.Lease)
	}
	if r.IntN(8) == 0 {
		in.PolicyProblem = "FencePolicy p has no level"
	}
	if r.IntN(5) == 0 {
		in.Blocked = "FencingRequest n1-old failed"
	}
	return in
}

// describeInput prints an input for a failure message.
func describeInput(in Input) string {
	node := "<gone>"
	if n := in.Node; n != nil {
		node = fmt.Sprintf("{uid %s labels %v conditions %v taints %v annotations %v bootID %q volumesInUse %v}",
			n.UID, n.Labels, n.Status.Conditions, n.Spec.Taints, n.Annotations, n.Status.NodeInfo.BootID, n.Status.VolumesInUse)
	}
	lease := "<none>"
	if in.Lease != nil {
		lease = in.Lease.Spec.RenewTime.String()
	}
	req := "<none>"
	if q := in.Request; q != nil {
		req = fmt.Sprintf("{spec %+v status %+v}", q.Spec, q.Status)
	}
	pol := "<none>"
	if in.Policy != nil {
		pol = fmt.Sprintf("%+v", in.Policy.Spec)
	}
	return fmt.Sprintf("node %s\nlease %s\npolicy %s (problem %q)\nrequest %s\nblocked %q VAs %d now %s",
		node, lease, pol, in.PolicyProblem, req, in.Blocked, in.VolumeAttachments, in.Now)
}

// TestDecideProperties checks Decide over random inputs against the rules
// of its doc comment and docs/fencing.md, beyond the invariants that
// TestDecideInvariants checks on a grid (which hold here too):
//   - a request is created only for a candidate node (detect.Unhealthy)
//     with a usable policy and no earlier failure of its boot;
//   - a request is triaged, admitted or cancelled only before Fencing;
//     admitted only when approved (spec.approved, else the policy), on a
//     usable policy and on the node the request is about; a human's
//     request is cancelled only for a recreated node;
//   - the out-of-service taint is added only for a Fenced request whose
//     policy applies it, never over an out-of-service taint already there
//     (a human's) and never again once the request's owner annotation is
//     there;
//   - Recovering only from Fenced, unfencing only from Recovering and only
//     where the policy unfences on a new boot; an unfencing decided at
//     now still holds at any later now;
//   - a Fencing request's decision does not depend on the node or its
//     Lease (a node that returns while fenced is fenced anyway);
//   - a terminal request is never acted on; every decision says why;
//     Decide changes none of its inputs.
func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 2026))
	steps := map[Step]int{}
	for i := range 20000 {
		in := randomInput(r)
		var before []any
		if i%5 == 0 { // a sample: the comparison costs more than the decision
			before = []any{in.Node.DeepCopy(), in.Lease.DeepCopy(), in.Policy.DeepCopy(), in.Request.DeepCopy()}
		}
		got := Decide(in)
		steps[got.Step]++
		fail := func(why string) { t.Fatalf("case %d: %s\n%s\ndecision %+v", i, why, describeInput(in), got) }
		if msg := brokenInvariant(in, got); msg != "" {
			fail(msg)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		if before != nil && !reflect.DeepEqual(before, []any{in.Node, in.Lease, in.Policy, in.Request}) {
			fail("Decide changed its input")
		}
		phase := fencingv1alpha1.FencingPhase("none")
		if in.Request != nil {
			phase = in.Request.Status.Phase
		}
		recreated := in.Node != nil && in.Request != nil && in.Request.Spec.NodeUID != "" && in.Node.UID != in.Request.Spec.NodeUID
		usable := in.Policy != nil && in.PolicyProblem == ""
		switch got.Step {
		case StepCreate:
			if in.Request != nil || in.Node == nil || !usable || in.Blocked != "" ||
				!detect.Unhealthy(in.Node, in.renewal(), DetectRules(in.Policy), in.Now).Candidate {
				fail("a request created without an open-request-free, unblocked candidate node and a usable policy")
			}
		case StepCheckPower:
			if in.Request != nil || in.Node == nil || !usable || in.Target == nil || in.Lease == nil ||
				in.Target.Annotations[names.PowerCheckAnnotation] == detect.PowerCheckToken(in.Lease) ||
				!detect.Suspect(in.renewal(), in.Now) {
				fail("a power check asked with an open request, without a usable policy, a FenceTarget or a missed renewal, or asked twice for one renewal")
			}
		case StepTriage:
			if (phase != "" && phase != pending) || !usable {
				fail("triaged outside Pending, or on an unusable policy")
			}
		case StepAdmit:
			approved := usable && AutomaticApproval(in.Policy)
			if a := in.Request.Spec.Approved; a != nil {
				approved = *a
			}
			if phase != triaged || !usable || !approved || recreated {
				fail("admitted outside Triaged, unapproved, on an unusable policy or for a recreated node")
			}
			if automatic(in.Request) && !detect.Unhealthy(in.Node, in.renewal(), DetectRules(in.Policy), in.Now).Candidate {
				fail("an automatic request admitted for a node that is no longer a candidate")
			}
		case StepCancel:
			if phase != "" && phase != pending && phase != triaged {
				fail("cancelled after Triaged")
			}
			if !automatic(in.Request) && got.Reason != ReasonNodeRecreated {
				fail("a human's request cancelled for another reason than a recreated node")
			}
		case StepOutOfService:
			if in.Policy == nil || !AppliesOutOfService(in.Policy) {
				fail("out-of-service taint added where the policy says None")
			}
			for _, taint := range in.Node.Spec.Taints {
				if taint.Key == names.OutOfServiceTaint {
					fail("a second out-of-service taint added over one already there")
				}
			}
			if OwnsOutOfService(in.Node, in.Request) {
				fail("out-of-service taint added again after the request's own was removed")
			}
		case StepRecovering:
			if phase != fenced {
				fail("Recovering from a phase other than Fenced")
			}
		case StepRecover:
			if phase != recovering || in.Policy == nil || !UnfencesOnNewBoot(in.Policy) {
				fail("unfenced outside Recovering or where the policy unfences by hand")
			}
			later := in
			later.Now = in.Now.Add(time.Duration(r.IntN(3600)) * time.Second)
			if again := Decide(later); again.Step != StepRecover {
				fail(fmt.Sprintf("unfencing no longer decided at the later %s: %+v", later.Now, again))
			}
		case StepFenced, StepFail:
			if phase != fencing {
				fail("Fenced or Failed outside Fencing")
			}
		}
		switch phase {
		case fencingv1alpha1.FencingPhaseRecovered, fencingv1alpha1.FencingPhaseFailed, fencingv1alpha1.FencingPhaseCancelled:
			if got.Step != StepNone {
				fail("a terminal request acted on")
			}
		case fencing:
			other := in
			other.Node, other.Lease = randomNode(r), randomInput(r).Lease
			if again := Decide(other); again.Step != got.Step || again.Level != got.Level || again.Reason != got.Reason {
				fail(fmt.Sprintf("a Fencing request's decision changed with the node or its Lease: %+v for\n%s", again, describeInput(other)))
			}
		}
	}
	for _, s := range []Step{StepNone, StepCreate, StepTriage, StepAdmit, StepFenced, StepFail, StepOutOfService, StepRecovering, StepRecover, StepCancel} {
		if steps[s] < 50 {
			t.Fatalf("step %q drawn only %d times: the generator does not exercise it (%v)", s, steps[s], steps)
		}
	}
}

// TestOwnsOutOfServiceProperties checks the owner rule of the out-of-service
// taint: Fenceline owns (and so may remove) a node's out-of-service taint
// only when the owner annotation names exactly the request's UID; a
// request without a UID, a missing node or request, a missing or empty
// annotation, or one naming another request never owns it.
func TestOwnsOutOfServiceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 2026))
	owned := 0
	for i := range 5000 {
		var node *v1.Node
		annotation, annotated := "", false
		if r.IntN(10) > 0 {
			var opts []testobj.NodeOption
			if r.IntN(4) > 0 {
				annotation, annotated = pick(r, "", "uid-a", "uid-b", "uid-a "), true
				opts = append(opts, testobj.Annotation(names.OutOfServiceOwnerAnnotation, annotation))
			}
			if r.IntN(2) == 0 {
				opts = append(opts, testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, propNow))
			}
			node = testobj.Node("n1", opts...)
		}
		var req *fencingv1alpha1.FencingRequest
		if r.IntN(10) > 0 {
			req = testobj.FencingRequest("n1")
			req.UID = pick[types.UID](r, "", "uid-a", "uid-b")
		}
		got := OwnsOutOfService(node, req)
		want := node != nil && req != nil && annotated && req.UID != "" && annotation == string(req.UID)
		if got != want {
			t.Fatalf("case %d: OwnsOutOfService(node annotated %v %q, request %v) = %v, want %v", i, annotated, annotation, req != nil && req.UID != "", got, want)
		}
		if got {
			owned++
		}
	}
	if owned < 200 {
		t.Fatalf("only %d owned cases drawn", owned)
	}
}
