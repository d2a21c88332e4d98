package app

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/kube/access"
)

// The rules fencing needs beyond upstream's RBAC. Without the Node and
// CSIDriver rules the attacher runs blind (fencing.Blindness); without the
// Event rules it only loses its Events.
var (
	nodeRules      = verbs("nodes", "", "get", "list", "watch")
	csiDriverRules = verbs("csidrivers", "storage.k8s.io", "get", "list", "watch")
	// A VolumeAttachment is cluster-scoped, so its Events land in "default".
	eventRules = []access.Rule{
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "patch", Resource: "events", Namespace: "default"},
	}
)

func verbs(resource, group string, vs ...string) []access.Rule {
	out := make([]access.Rule, len(vs))
	for i, v := range vs {
		out[i] = access.Rule{Verb: v, Group: group, Resource: resource}
	}
	return out
}

// checkAccess finds out whether the attacher runs blind, before any
// informer starts: an informer whose list is forbidden never syncs, and an
// operator who swapped upstream's image without adding Fenceline's three
// RBAC rules would get an attacher that attaches nothing. Blind, it works
// as upstream's does and says so at default verbosity. It waits for the API
// server first and retries an unanswered question until ctx ends (then it
// returns ctx.Err()). An identity that may not even ask is taken as blind:
// not knowing is no licence to fence.
func checkAccess(ctx context.Context, client kubernetes.Interface) (bool, error) {
	logger := klog.FromContext(ctx)
	if err := kubeclient.WaitForAPIServer(ctx, client.Discovery().RESTClient(), kubeclient.DefaultAPIWait); err != nil {
		return false, err
	}
	var nodes, drivers, events []access.Rule
	ask := func(ctx context.Context) (bool, error) {
		var err error
		if nodes, err = access.Missing(ctx, client.AuthorizationV1(), nodeRules); err == nil {
			if drivers, err = access.Missing(ctx, client.AuthorizationV1(), csiDriverRules); err == nil {
				events, err = access.Missing(ctx, client.AuthorizationV1(), eventRules)
			}
		}
		if apierrors.IsForbidden(err) {
			nodes = []access.Rule{{Verb: "create", Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}}
			return true, nil
		}
		if err != nil {
			logger.Error(err, "Cannot check the attacher's RBAC yet; retrying")
			return false, nil
		}
		return true, nil
	}
	if err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, ask); err != nil {
		return false, fmt.Errorf("check the attacher's RBAC: %w", err)
	}
	if len(events) > 0 {
		logger.Error(nil, "RBAC does not allow Events; attaches, detaches and fencing problems are logged only", "missing", access.Join(events))
	}
	blind, why := fencing.Blindness(rulesText(nodes), rulesText(drivers))
	if blind {
		logger.Error(nil, "Fencing is OFF: "+why+"; restart the attacher after granting them", "missing", access.Join(append(nodes, drivers...)))
	}
	return blind, nil
}

func rulesText(rules []access.Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.String()
	}
	return out
}
