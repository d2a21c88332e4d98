package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/remediation"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestExternalRemediation: Fenceline as NodeHealthCheck's remediator. The
// node is labelled for another detector, so node-fencing's own detection
// creates nothing; a stand-in detector following NodeHealthCheck's
// contract sees the node Ready=Unknown and creates a FencelineRemediation
// from the template, named after the node, in the template's namespace.
// The remediation controller creates one approved FencingRequest, the node
// is fenced and the pod fails over with its volume fenced off the node
// first; the remediation reports Processing, then Succeeded. The node is
// powered on; as soon as it is Ready the detector deletes the remediation
// (the real NodeHealthCheck does so while the request is still
// Recovering), which goes without its request being touched, and the node
// is unfenced.
func TestExternalRemediation(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{Fencing: true, ControllerArgs: []string{"--controllers=*,remediation", "--remediation-namespaces=app"}})
	setup, err := s.w.SetUpFencing(s.ctx, world.BMCRedfish, s.timeline, nil)
	must(t, err)
	t.Cleanup(setup.Close)
	fs := &fencingScenario{scenario: s, setup: setup}
	fencing := setup.Client.FencingV1alpha1()

	tmpl, err := fencing.FencelineRemediationTemplates(s.ns).Create(s.ctx, &fencingv1alpha1.FencelineRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "fenceline"},
		Spec: fencingv1alpha1.FencelineRemediationTemplateSpec{Template: fencingv1alpha1.FencelineRemediationTemplateResource{
			Spec: fencingv1alpha1.FencelineRemediationSpec{PolicyName: setup.Policy.Name},
		}},
	}, metav1.CreateOptions{})
	must(t, err)

	nodeA := fs.startDB().Spec.NodeName
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{detect.ExternalDetectionLabel: "nhc-stand-in"}}})
	_, err = s.w.Cluster.Client().CoreV1().Nodes().Patch(s.ctx, nodeA, types.MergePatchType, patch, metav1.PatchOptions{})
	must(t, err)

	fs.hang(nodeA)
	// The stand-in detector: Ready=Unknown is its unhealthy condition (a
	// duration of 0 here; 300 s by NodeHealthCheck's default).
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	rem := nhcStandIn(t, s.ctx, setup, tmpl, nodeA)
	s.timeline.Add(time.Now(), "the stand-in detector created FencelineRemediation %s/%s", rem.Namespace, rem.Name)

	req := fs.remediatedFailover(setup, rem, nodeA)
	if n := len(mustRequests(t, fs, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want 1: node-fencing's own detection must not create one for a node another detector owns", n, nodeA)
	}

	// The node comes back. NodeHealthCheck deletes its remediation as soon
	// as the node's conditions are healthy (Ready=True, no healthyDelay),
	// as it was seen doing: while the request is still Recovering. The
	// finalizer goes, the request is not asked to cancel, and node-fencing
	// finishes the recovery on its own.
	dev, err := setup.BMCs[nodeA].Device()
	must(t, err)
	must(t, dev.On(s.ctx))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionTrue, nodeLostTimeout))
	must(t, fencing.FencelineRemediations(s.ns).Delete(s.ctx, rem.Name, metav1.DeleteOptions{}))
	s.timeline.Add(time.Now(), "node %s Ready: the stand-in detector deleted FencelineRemediation %s", nodeA, rem.Name)
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, fenceTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := fencing.FencelineRemediations(s.ns).Get(ctx, rem.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("FencelineRemediation %s not gone after its deletion: %v", rem.Name, err)
	}
	rec, err := setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseRecovered, failoverTimeout)
	must(t, err)
	fs.assertUnfenced(nodeA)
	if rec.UID != req.UID {
		t.Fatalf("request %s Recovered, want %s", rec.Name, req.Name)
	}
	if _, asked := rec.Annotations[names.UnfenceAnnotation]; asked {
		t.Fatalf("request %s was asked to unfence by the remediation's deletion: %v", rec.Name, rec.Annotations)
	}
}

// nhcStandIn creates the remediation as NodeHealthCheck does: the
// template's spec.template.spec copied into spec, named after the node, in
// the template's namespace, with NHC's annotations and label.
func nhcStandIn(t *testing.T, ctx context.Context, setup *world.FencingSetup, tmpl *fencingv1alpha1.FencelineRemediationTemplate, node string) *fencingv1alpha1.FencelineRemediation {
	t.Helper()
	rem, err := setup.Client.FencingV1alpha1().FencelineRemediations(tmpl.Namespace).Create(ctx, &fencingv1alpha1.FencelineRemediation{
		ObjectMeta: metav1.ObjectMeta{
			Name: node, Namespace: tmpl.Namespace,
			Annotations: map[string]string{remediation.NodeNameAnnotation: node, "remediation.medik8s.io/template-name": tmpl.Name},
			Labels:      map[string]string{"app.kubernetes.io/part-of": "node-healthcheck-controller"},
		},
		Spec: tmpl.Spec.Template.Spec,
	}, metav1.CreateOptions{})
	must(t, err)
	return rem
}

// waitRemediation polls the remediation until ok holds.
func waitRemediation(t *testing.T, ctx context.Context, setup *world.FencingSetup, rem *fencingv1alpha1.FencelineRemediation, what string, ok func(*fencingv1alpha1.FencelineRemediation) bool) *fencingv1alpha1.FencelineRemediation {
	t.Helper()
	var last *fencingv1alpha1.FencelineRemediation
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fenceTimeout, true, func(ctx context.Context) (bool, error) {
		r, err := setup.Client.FencingV1alpha1().FencelineRemediations(rem.Namespace).Get(ctx, rem.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = r
		return ok(r), nil
	})
	if err != nil {
		status := "never read"
		if last != nil {
			status = fmt.Sprintf("%+v", last.Status)
		}
		t.Fatalf("FencelineRemediation %s/%s not %s: %v; status %s", rem.Namespace, rem.Name, what, err, status)
	}
	return last
}

// remediatedFailover waits for the remediation's request Fenced (the
// remediation's own, approved, with a read-back Off), for the pod moved
// with its volume fenced off node first, and for the remediation
// Succeeded=True and no longer Processing, naming its request and node.
// It returns the request.
func (s *fencingScenario) remediatedFailover(setup *world.FencingSetup, rem *fencingv1alpha1.FencelineRemediation, node string) *fencingv1alpha1.FencingRequest {
	t := s.t
	t.Helper()
	req, err := setup.WaitRequestPhase(s.ctx, node, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	seenFenced := time.Now()
	s.timeline.Add(seenFenced, "FencingRequest %s seen Fenced", req.Name)
	if req.Spec.Requester != remediation.Requester(rem) || req.Spec.Reason != remediation.ReasonExternalRemediation || req.Spec.Approved == nil || !*req.Spec.Approved {
		t.Fatalf("request %s: requester %q, reason %q, approved %v; want the remediation's approved request", req.Name, req.Spec.Requester, req.Spec.Reason, req.Spec.Approved)
	}
	checkProof(t, req, setup.BMCs[node])
	s.assertMovedFenced(node, seenFenced)
	got := waitRemediation(t, s.ctx, setup, rem, "Succeeded=True", func(r *fencingv1alpha1.FencelineRemediation) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.RemediationSucceeded)
	})
	s.timeline.Add(time.Now(), "FencelineRemediation %s Succeeded=True", rem.Name)
	if meta.IsStatusConditionTrue(got.Status.Conditions, fencingv1alpha1.RemediationProcessing) || got.Status.FencingRequestName != req.Name || got.Status.NodeName != node {
		t.Fatalf("remediation status %+v, want Processing=False, request %s, node %s", got.Status, req.Name, node)
	}
	return req
}
