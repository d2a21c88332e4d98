package world

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/names"
)

// FenceAgentServiceAccount is fenceline-fence-agent's identity
// (deploy/fence-agent).
const FenceAgentServiceAccount = "fenceline-fence-agent"

// Names of the fencing objects SetUpFencing creates.
const (
	// FencePolicyName is the policy selecting every node.
	FencePolicyName = "all-nodes"
	// FenceClassRedfish and FenceClassIPMI are the classes of the BMCs.
	FenceClassRedfish = "bmc-redfish"
	FenceClassIPMI    = "bmc-ipmi"
)

// startFenceAgent runs fenceline-fence-agent with its deploy RBAC. Its
// probe runs every few seconds so that a test sees FenceTarget status soon.
func (w *World) startFenceAgent(ctx context.Context, extra []string) error {
	if w.installed {
		procs, args, err := w.RunDeployment(ctx, FenceAgentDeployment)
		if err != nil {
			return err
		}
		w.FenceAgent, w.fenceAgentArgs = procs[0], args
		return nil
	}
	w.fenceAgentArgs = append([]string{"--v=4", "--probe-interval=5s"}, extra...)
	p, err := w.startComponent(ctx, "fenceline-fence-agent", "fence-agent", FenceAgentServiceAccount, w.fenceAgentArgs)
	if err != nil {
		return err
	}
	w.FenceAgent = p
	return nil
}

// FencingSetup is what SetUpFencing made: a BMC per node and the policy.
type FencingSetup struct {
	BMCs   map[string]*BMC
	Policy *fencingv1alpha1.FencePolicy
	Client versioned.Interface
}

// SetUpFencing gives every node of the world a simulated BMC of kind with
// its FenceTarget, creates the FenceClass of that kind and a FencePolicy
// (FencePolicyName) selecting every node with one level, that class. The
// policy's timings suit the test cluster (4 s node Leases): a Lease stale
// for 5 s triggers, recovery waits 2 s of Ready. edit, when not nil,
// changes the policy before it is created. The BMCs close with the test
// (Close them earlier to stop their boots).
func (w *World) SetUpFencing(ctx context.Context, kind BMCKind, tl *Timeline, edit func(*fencingv1alpha1.FencePolicy)) (*FencingSetup, error) {
	cs, err := w.InstallFencingCRDs(ctx)
	if err != nil {
		return nil, err
	}
	class := FenceClassRedfish
	if kind == BMCIPMI {
		class = FenceClassIPMI
	}
	if err := createIgnoringExisting(w.FenceClass(class, kind), func(fc *fencingv1alpha1.FenceClass) error {
		_, err := cs.FencingV1alpha1().FenceClasses().Create(ctx, fc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("creating FenceClass %s: %w", class, err)
	}
	setup := &FencingSetup{BMCs: map[string]*BMC{}, Client: cs}
	for _, n := range w.AllNodes() {
		b, err := w.StartBMC(ctx, n, kind, WithTimeline(tl))
		if err != nil {
			setup.Close()
			return nil, err
		}
		setup.BMCs[n] = b
		if _, err := b.CreateFenceTarget(ctx, class); err != nil {
			setup.Close()
			return nil, err
		}
	}
	p := TestFencePolicy(class)
	if edit != nil {
		edit(p)
	}
	if setup.Policy, err = cs.FencingV1alpha1().FencePolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		setup.Close()
		return nil, fmt.Errorf("creating FencePolicy %s: %w", p.Name, err)
	}
	return setup, nil
}

// Close closes every BMC.
func (s *FencingSetup) Close() {
	for _, b := range s.BMCs {
		b.Close()
	}
}

// FenceClass is the class of kind that the world's BMCs answer: short
// timeouts, polled every 200 ms, the Redfish BMC's self-signed
// certificate accepted.
func (w *World) FenceClass(name string, kind BMCKind) *fencingv1alpha1.FenceClass {
	retries := int32(1)
	spec := fencingv1alpha1.FenceClassSpec{
		Method:  fencingv1alpha1.FenceMethodIPMI,
		Retries: &retries,
		Timeouts: fencingv1alpha1.FenceTimeouts{
			Action:       &metav1.Duration{Duration: 5 * time.Second},
			Verify:       &metav1.Duration{Duration: 5 * time.Second},
			PollInterval: &metav1.Duration{Duration: 200 * time.Millisecond},
		},
	}
	if kind == BMCRedfish {
		spec.Method = fencingv1alpha1.FenceMethodRedfish
		spec.Redfish = &fencingv1alpha1.RedfishSettings{InsecureTLS: true}
	}
	return &fencingv1alpha1.FenceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// TestFencePolicy is the world's policy: every node, the class at level 1,
// timings for the test cluster.
func TestFencePolicy(class string) *fencingv1alpha1.FencePolicy {
	return &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: FencePolicyName},
		Spec: fencingv1alpha1.FencePolicySpec{
			Detection: fencingv1alpha1.FenceDetection{LeaseStaleAfter: &metav1.Duration{Duration: 5 * time.Second}},
			Levels:    []fencingv1alpha1.FenceLevel{{Index: 1, FenceClassNames: []string{class}, Timeout: &metav1.Duration{Duration: 15 * time.Second}}},
			StormGuard: fencingv1alpha1.StormGuard{
				Cooldown: &metav1.Duration{Duration: 5 * time.Second},
			},
			Recovery: fencingv1alpha1.FenceRecovery{HealthyDelay: &metav1.Duration{Duration: 2 * time.Second}},
		},
	}
}

func createIgnoringExisting[T any](obj T, create func(T) error) error {
	if err := create(obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// FencingRequests returns the FencingRequests of node, oldest first.
func (s *FencingSetup) FencingRequests(ctx context.Context, node string) ([]fencingv1alpha1.FencingRequest, error) {
	list, err := s.Client.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing FencingRequests: %w", err)
	}
	var out []fencingv1alpha1.FencingRequest
	for _, r := range list.Items {
		if r.Spec.NodeName == node {
			out = append(out, r)
		}
	}
	return out, nil
}

// WaitRequestPhase waits until node has a FencingRequest in phase and
// returns it.
func (s *FencingSetup) WaitRequestPhase(ctx context.Context, node string, phase fencingv1alpha1.FencingPhase, timeout time.Duration) (*fencingv1alpha1.FencingRequest, error) {
	var got *fencingv1alpha1.FencingRequest
	err := WaitFor(ctx, timeout, fmt.Sprintf("a FencingRequest of %s in phase %s", node, phase), func(ctx context.Context) (bool, error) {
		reqs, err := s.FencingRequests(ctx, node)
		if err != nil {
			return false, nil
		}
		for i := range reqs {
			if reqs[i].Status.Phase == phase {
				got = &reqs[i]
				return true, nil
			}
		}
		return false, nil
	})
	return got, err
}

// NodeCondition returns the status of node's condition typ ("" when the
// node does not have it).
func (w *World) NodeCondition(ctx context.Context, node, typ string) (corev1.ConditionStatus, error) {
	n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading node %s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ {
			return c.Status, nil
		}
	}
	return "", nil
}

// FencingTaints are the taint keys node-fencing may put on a node.
var FencingTaints = []string{names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint}
