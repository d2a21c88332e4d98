package nodefencing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// randomAsk draws an operator's ask: none half the time, else verified
// Off, Rebooted, nothing or a value that is neither.
func randomAsk(r *rand.Rand) map[string]string {
	if r.IntN(2) == 0 {
		return nil
	}
	return testobj.UnfenceAsk("user:ada", pick(r, "", "Off", "Rebooted", "yes"))
}

// withMarks adds a random share of the marks node-fencing leaves.
func withMarks(r *rand.Rand, n *v1.Node) {
	since := propNow.Add(-time.Hour)
	opts := []testobj.NodeOption{}
	if r.IntN(2) == 0 {
		opts = append(opts, testobj.FailedFenceMarks(since))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, since))
	}
	for _, o := range opts {
		o(n)
	}
	if a := randomAsk(r); a != nil && r.IntN(2) == 0 {
		for k, v := range a {
			testobj.Annotation(k, v)(n)
		}
	}
}

// randomAskInput draws an input where asks and left marks matter: the
// open request (if any) may carry an ask, the node marks, a Failed request
// of the node may be there with an ask of its own.
func randomAskInput(r *rand.Rand) Input {
	in := randomInput(r)
	if in.Request != nil {
		in.Request.Annotations = randomAsk(r)
	}
	if in.Node != nil {
		withMarks(r, in.Node)
	}
	if r.IntN(2) == 0 {
		f := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFailed), testobj.BootIDAtFence(pick(r, "boot-1", "boot-2", "")))
		f.Annotations = randomAsk(r)
		in.Failed = f
	}
	return in
}

// withoutAsks is the input with every ask removed.
func withoutAsks(in Input) Input {
	strip := func(a map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			if k != names.UnfenceAnnotation && k != names.UnfenceVerifiedAnnotation {
				out[k] = v
			}
		}
		return out
	}
	if in.Request != nil {
		in.Request = in.Request.DeepCopy()
		in.Request.Annotations = strip(in.Request.Annotations)
	}
	if in.Failed != nil {
		in.Failed = in.Failed.DeepCopy()
		in.Failed.Annotations = strip(in.Failed.Annotations)
	}
	if in.Node != nil {
		in.Node = in.Node.DeepCopy()
		in.Node.Annotations = strip(in.Node.Annotations)
	}
	return in
}

// TestAskProperties checks, over random inputs with asks and left marks:
//   - the invariants of TestDecideInvariants (clearing included) hold;
//   - an ask changes a decision only into one it may ask for: a cancel
//     before Fencing, a recovery, an unfence, a clear; never for a request
//     in Fencing, never into a create, an admission or a fence;
//   - an ask never overrides a known boot ID equal to the one at fence
//     time;
//   - a clear decided at now still holds at any later now while the
//     kubelet keeps renewing its Lease.
func TestAskProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 2026))
	steps := map[Step]int{}
	for i := range 20000 {
		in := randomAskInput(r)
		got := Decide(in)
		steps[got.Step]++
		fail := func(why string) {
			t.Fatalf("case %d: %s\n%s\nfailed %+v\ndecision %+v", i, why, describeInput(in), in.Failed, got)
		}
		if msg := brokenInvariant(in, got); msg != "" {
			fail(msg)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		plain := Decide(withoutAsks(in))
		if plain.Step != got.Step {
			switch got.Step {
			case StepCancel, StepRecovering, StepRecover, StepClear:
			default:
				fail(fmt.Sprintf("an ask changed %s into %s", plain.Step, got.Step))
			}
			if in.Request != nil && in.Request.Status.Phase == fencing {
				fail("an ask changed the decision of a Fencing request")
			}
		}
		if got.Step == StepClear {
			// Later, with the kubelet still renewing: a Lease that went
			// stale since makes a candidate again, rightly.
			later := in
			later.Now = in.Now.Add(time.Duration(r.IntN(3600)) * time.Second)
			if in.Lease != nil {
				later.Lease, later.LeaseObserved = testobj.Lease("n1", later.Now), later.Now
			}
			if again := Decide(later); again.Step != StepClear {
				fail(fmt.Sprintf("clearing no longer decided at the later %s: %+v", later.Now, again))
			}
		}
	}
	for _, s := range []Step{StepCancel, StepRecovering, StepRecover, StepClear} {
		if steps[s] < 50 {
			t.Fatalf("step %q drawn only %d times: the generator does not exercise it (%v)", s, steps[s], steps)
		}
	}
}
