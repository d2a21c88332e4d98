package world

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/test/cluster"
)

// fenceOpts verify a power-off within seconds; the lying BMC case
// shortens VerifyTimeout further.
var fenceOpts = power.Options{ActionTimeout: 5 * time.Second, VerifyTimeout: 10 * time.Second, PollInterval: 100 * time.Millisecond}

// leaseSlack is how long after a verified power-off KWOK may still have
// renewed the node Lease: one renewal it had under way when the power
// label went.
const leaseSlack = 2 * time.Second

// TestBMCFencesWorldNodes fences each node of a two-node world through its
// simulated BMC (Redfish for one, IPMI for the other) with the product's
// fence device and power.PowerOff: the BMC reads Off only once the node
// is off, the node stops renewing its Lease until kube-controller-manager
// marks it Unknown, and a power-on boots it with a new boot ID. A lying
// BMC that accepts the power-off and stays on is never taken for a fence,
// and its node keeps heartbeating.
func TestBMCFencesWorldNodes(t *testing.T) {
	w := Start(t, Options{Nodes: []string{"node-a", "node-b"}, NoAttacher: true, NoController: true})
	t0 := time.Now()
	tl := &Timeline{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("timeline:\n%s", tl.Format(t0))
		}
	})
	for _, tc := range []struct {
		node  string
		kind  BMCKind
		class string
	}{{"node-a", BMCRedfish, "redfish-forceoff"}, {"node-b", BMCIPMI, "ipmi-off"}} {
		b, err := w.StartBMC(t.Context(), tc.node, tc.kind, WithTimeline(tl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		checkBMCObjects(t, w, b, tc.class)
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			fenceAndBoot(t, w, b)
			lyingBMC(t, w, b)
			checkTimeline(t, tl, b)
		})
	}
}

// checkBMCObjects checks the credentials Secret and the FenceTarget a
// controller test would use.
func checkBMCObjects(t *testing.T, w *World, b *BMC, class string) {
	t.Helper()
	s, err := w.Cluster.Client().CoreV1().Secrets(Namespace).Get(t.Context(), "bmc-"+b.Node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the BMC Secret: %v", err)
	}
	if string(s.Data[corev1.BasicAuthUsernameKey]) != b.Username || string(s.Data[corev1.BasicAuthPasswordKey]) != b.Password {
		t.Fatalf("Secret %s does not hold the BMC's credentials", s.Name)
	}
	ft, err := b.CreateFenceTarget(t.Context(), class)
	if err != nil {
		t.Fatal(err)
	}
	ep := ft.Spec.Endpoints[0]
	if ft.Name != b.Node || ep.Address != b.Address || ep.SystemID != b.SystemID || ep.CredentialsSecretRef.Name != s.Name {
		t.Fatalf("FenceTarget %+v does not point at the BMC %s (system %q, Secret %s)", ft, b.Address, b.SystemID, s.Name)
	}
}

// fenceAndBoot powers the node off through its BMC, checks that it is off
// and stays off for the control plane, then powers it on again.
func fenceAndBoot(t *testing.T, w *World, b *BMC) {
	ctx := t.Context()
	dev, err := b.Device()
	if err != nil {
		t.Fatal(err)
	}
	boot0, err := w.Cluster.BootID(ctx, b.Node)
	if err != nil {
		t.Fatal(err)
	}
	firstOff := watchFirstOff(ctx, b)
	res, err := power.PowerOff(ctx, dev, fenceOpts, time.Now)
	if err != nil || res.Verified != power.StateOff {
		t.Fatalf("fencing %s: %+v, %v", b.Node, res, err)
	}
	if nodeWasOff := <-firstOff; !nodeWasOff {
		t.Fatalf("the BMC of %s read Off while the node was still up", b.Node)
	}
	if !b.ReadsOff() || w.Kubelets[b.Node].Powered() {
		t.Fatalf("after the fence: BMC reads off=%v, kubelet powered=%v", b.ReadsOff(), w.Kubelets[b.Node].Powered())
	}
	if err := w.Cluster.WaitNodeReady(ctx, b.Node, corev1.ConditionUnknown, 4*cluster.NodeMonitorGracePeriod); err != nil {
		t.Fatal(err)
	}
	lease, err := w.NodeLease(ctx, b.Node)
	if err != nil {
		t.Fatal(err)
	}
	if renewed := lease.Spec.RenewTime.Time; renewed.After(res.VerifiedAt.Add(leaseSlack)) {
		t.Fatalf("the Lease of %s was renewed at %v, %v after the power-off was verified", b.Node, renewed, renewed.Sub(res.VerifiedAt))
	}
	if err := dev.On(ctx); err != nil {
		t.Fatalf("powering %s on: %v", b.Node, err)
	}
	if s, err := dev.Status(ctx); err != nil || s != power.StateOn {
		t.Fatalf("after power-on the BMC reads %s, %v", s, err)
	}
	err = WaitFor(ctx, 2*cluster.NodeReadyTimeout, b.Node+" booted and Ready", func(ctx context.Context) (bool, error) {
		n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, b.Node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient; keep polling until the deadline
		}
		return n.Status.NodeInfo.BootID != boot0 && readyStatus(n) == corev1.ConditionTrue && w.Kubelets[b.Node].Powered(), nil
	})
	if err != nil {
		t.Fatalf("%v (BMC errors: %v)", err, b.Errors())
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Fatalf("the BMC's power changes failed: %v", errs)
	}
}

// watchFirstOff polls the BMC's power state until it first reads Off and
// sends whether the node was off by then.
func watchFirstOff(ctx context.Context, b *BMC) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			if b.ReadsOff() {
				out <- b.rail.down.Load() && !b.w.Kubelets[b.Node].Powered()
				return
			}
			select {
			case <-ctx.Done():
				out <- false
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// lyingBMC makes the BMC accept the power-off and stay on: the fence is
// not verified, the BMC was asked, and the node keeps renewing its Lease.
func lyingBMC(t *testing.T, w *World, b *BMC) {
	ctx := t.Context()
	if err := b.SetFaults(BMCFaults{StaysOn: true}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.SetFaults(BMCFaults{}); err != nil {
			t.Error(err)
		}
	}()
	dev, err := b.Device()
	if err != nil {
		t.Fatal(err)
	}
	asked := len(b.PowerCommands())
	opts := fenceOpts
	opts.VerifyTimeout = time.Second
	res, err := power.PowerOff(ctx, dev, opts, time.Now)
	if !errors.Is(err, power.ErrNotVerified) || res.Verified != power.StateOn {
		t.Fatalf("a lying BMC: %+v, %v; want ErrNotVerified with On read back", res, err)
	}
	failed := time.Now()
	if cmds := b.PowerCommands()[asked:]; len(cmds) != 1 || !cmds[0].OK {
		t.Fatalf("the lying BMC received %+v, want one accepted power-off", cmds)
	}
	err = WaitFor(ctx, 4*cluster.NodeMonitorGracePeriod, b.Node+" renewing its Lease after the failed fence", func(ctx context.Context) (bool, error) {
		l, err := w.NodeLease(ctx, b.Node)
		if err != nil {
			return false, nil //nolint:nilerr // transient; keep polling until the deadline
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(failed), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !b.PoweredOn() || !w.Kubelets[b.Node].Powered() {
		t.Fatalf("after the lying BMC: BMC on=%v, kubelet powered=%v", b.PoweredOn(), w.Kubelets[b.Node].Powered())
	}
}

// checkTimeline checks that the BMC's power events are in the timeline,
// in order.
func checkTimeline(t *testing.T, tl *Timeline, b *BMC) {
	t.Helper()
	accepted := "ForceOff accepted"
	if b.Kind == BMCIPMI {
		accepted = "Chassis Control power down accepted"
	}
	prefix := "BMC of " + b.Node + " (" + string(b.Kind) + "): "
	var last time.Time
	for _, want := range []string{"power cut", accepted, "power read back Off", "power on: booting", "node booted with a new boot ID"} {
		at, ok := tl.First(prefix + want)
		if !ok || at.Before(last) {
			t.Fatalf("timeline lacks %q after the previous event:\n%s", prefix+want, tl.Format(last))
		}
		last = at
	}
	if !strings.Contains(tl.Format(last), prefix+"power read back On") {
		t.Fatalf("timeline lacks the lying BMC's On read-back")
	}
}
