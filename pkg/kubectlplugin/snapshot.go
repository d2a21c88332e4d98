// Package kubectlplugin is the library behind kubectl-fenceline, the kubectl
// plugin that shows what Fenceline sees (status), asks for a manual fence or
// unfence through FencingRequests (fence, unfence) and explains what each
// controller would decide now for a node (explain).
//
// It only reads the cluster and, for fence and unfence, makes the writes a
// human is documented to make. Every verdict it prints comes from the same
// pure decision functions the components run (nodefencing.Decide,
// podgc.Decide, quarantine.DecidePod, fencing.Decide, ...), fed with objects
// read from the API server, so that the plugin and the controllers never
// disagree about a rule.
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencingclient "fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/names"
)

// Clients are the API clients the plugin uses.
type Clients struct {
	Kube    kubernetes.Interface
	Fencing fencingclient.Interface
	// Dynamic reads csi-addons NetworkFences; nil reads none (explain then
	// says so where a policy makes them).
	Dynamic dynamic.Interface
}

// Snapshot is the cluster state the status and explain commands read, taken
// once so that every verdict is computed on the same data.
type Snapshot struct {
	Now               time.Time
	Nodes             []*v1.Node
	Drivers           []*storagev1.CSIDriver
	VolumeAttachments []*storagev1.VolumeAttachment
	// Heartbeats are the fenceline-attacher heartbeat Leases of every
	// namespace (label names.DriverLabel).
	Heartbeats []*coordinationv1.Lease
	// FencingAPI is false when the fencing CRDs are not installed; the
	// fencing kinds below are then empty.
	FencingAPI bool
	Requests   []*fencingv1alpha1.FencingRequest
	Policies   []*fencingv1alpha1.FencePolicy
	Classes    []*fencingv1alpha1.FenceClass
	// StorageFences are the storage fences the drivers' attachers
	// published; empty when their CRD is not installed (an older one).
	StorageFences []*fencingv1alpha1.StorageFence
	// StorageFencesNote says why StorageFences were not read, "" when they
	// were.
	StorageFencesNote string
	// Events are the Events of Fenceline's components, oldest first.
	Events []v1.Event
	// NetworkFences are the csi-addons NetworkFences Fenceline made, by
	// the UID of their FencingRequest, and NetworkFenceClasses every class
	// by name; NetworkFencesErr is why they were not read (nil when they
	// were; networkfence.ErrNotServed when csi-addons is not installed).
	NetworkFences       map[types.UID][]networkfence.Fence
	NetworkFenceClasses map[string]networkfence.Class
	NetworkFencesErr    error
}

// permissionHint is appended to a Forbidden error: which rule is missing.
func permissionHint(err error, verb, resource string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("not allowed to %s %s (RBAC: grant %s on %s to your user): %w", verb, resource, verb, resource, err)
	}
	return fmt.Errorf("%s %s: %w", verb, resource, err)
}

// isNoAPI reports whether err says that the API group is not served, as when
// the fencing CRDs are not installed.
func isNoAPI(err error) bool {
	var noMatch *meta.NoKindMatchError
	return apierrors.IsNotFound(err) || errors.As(err, &noMatch)
}

// ReadSnapshot reads the snapshot from the API server. now is the time the
// verdicts are computed for.
func ReadSnapshot(ctx context.Context, c Clients, now time.Time) (*Snapshot, error) {
	s := &Snapshot{Now: now}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, permissionHint(err, "list", "nodes")
	}
	s.Nodes = pointers(nodes.Items)
	if err := s.readAttachers(ctx, c.Kube); err != nil {
		return nil, err
	}
	vas, err := c.Kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, permissionHint(err, "list", "volumeattachments.storage.k8s.io")
	}
	s.VolumeAttachments = pointers(vas.Items)
	if err := s.readFencing(ctx, c.Fencing); err != nil {
		return nil, err
	}
	if !s.FencingAPI {
		s.StorageFencesNote = "the fencing API (fenceline.io) is not installed"
	} else if err := s.readStorageFences(ctx, c.Fencing); err != nil {
		return nil, err
	}
	if s.Events, err = readEvents(ctx, c.Kube); err != nil {
		return nil, err
	}
	s.readNetworkFences(ctx, discoveryOf(c.Kube), c.Dynamic)
	return s, nil
}

// readNetworkFences reads the NetworkFences Fenceline made and every
// NetworkFenceClass; where it cannot, NetworkFencesErr says why and the
// snapshot is still taken.
func (s *Snapshot) readNetworkFences(ctx context.Context, disc discovery.DiscoveryInterface, d dynamic.Interface) {
	if d == nil || !s.FencingAPI || !networkfence.Served(disc) {
		// Asked first: RBAC refuses a list of a kind that is not served
		// as it refuses one that is.
		s.NetworkFencesErr = networkfence.ErrNotServed
		return
	}
	fences, err := d.Resource(networkfence.Resource).List(ctx, metav1.ListOptions{LabelSelector: networkfence.RequestLabel})
	if err != nil {
		s.NetworkFencesErr = noNetworkFences(err, "networkfences")
		return
	}
	classes, err := d.Resource(networkfence.ClassResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.NetworkFencesErr = noNetworkFences(err, "networkfenceclasses")
		return
	}
	s.NetworkFences = map[types.UID][]networkfence.Fence{}
	for i := range fences.Items {
		uid := types.UID(fences.Items[i].GetLabels()[networkfence.RequestLabel])
		s.NetworkFences[uid] = append(s.NetworkFences[uid], networkfence.FromUnstructured(&fences.Items[i]))
	}
	s.NetworkFenceClasses = map[string]networkfence.Class{}
	for i := range classes.Items {
		c := networkfence.ClassFromUnstructured(&classes.Items[i])
		s.NetworkFenceClasses[c.Name] = c
	}
}

func noNetworkFences(err error, resource string) error {
	if isNoAPI(err) {
		return networkfence.ErrNotServed
	}
	return permissionHint(err, "list", resource+".csiaddons.openshift.io")
}

// discoveryOf is the clientset's discovery client, nil without one.
func discoveryOf(k kubernetes.Interface) discovery.DiscoveryInterface {
	if k == nil {
		return nil
	}
	return k.Discovery()
}

// snapshotFences is networkfence.Reader over a snapshot.
type snapshotFences struct{ s *Snapshot }

func (f snapshotFences) FencesOf(_ context.Context, request types.UID) ([]networkfence.Fence, error) {
	if f.s.NetworkFencesErr != nil {
		return nil, f.s.NetworkFencesErr
	}
	return f.s.NetworkFences[request], nil
}

func (f snapshotFences) Class(_ context.Context, name string) (*networkfence.Class, error) {
	if f.s.NetworkFencesErr != nil {
		return nil, f.s.NetworkFencesErr
	}
	c, ok := f.s.NetworkFenceClasses[name]
	if !ok {
		return nil, nil
	}
	return &c, nil
}

// readAttachers reads the CSIDrivers and the fenceline-attacher heartbeat
// Leases, all that the version command needs of a snapshot.
func (s *Snapshot) readAttachers(ctx context.Context, c kubernetes.Interface) error {
	drivers, err := c.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return permissionHint(err, "list", "csidrivers.storage.k8s.io")
	}
	s.Drivers = pointers(drivers.Items)
	leases, err := c.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: names.DriverLabel})
	if err != nil {
		return permissionHint(err, "list", "leases.coordination.k8s.io")
	}
	s.Heartbeats = pointers(leases.Items)
	return nil
}

// components are the sources of Fenceline's Events.
var components = []string{"fenceline-controller", "fenceline-attacher", "fenceline-fence-agent"}

// readEvents lists the Events of Fenceline's components, selected by
// source on the server so that a busy cluster's other Events stay there.
func readEvents(ctx context.Context, c kubernetes.Interface) ([]v1.Event, error) {
	seen := map[string]bool{}
	var all []v1.Event
	for _, component := range components {
		list, err := c.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("source", component).String()})
		if err != nil {
			return nil, permissionHint(err, "list", "events")
		}
		for _, e := range list.Items {
			if key := e.Namespace + "/" + e.Name; !seen[key] {
				seen[key] = true
				all = append(all, e)
			}
		}
	}
	return fencelineEvents(all), nil
}

// readFencing reads the fencing kinds; a cluster without the CRDs has none.
func (s *Snapshot) readFencing(ctx context.Context, c fencingclient.Interface) error {
	api := c.FencingV1alpha1()
	reqs, err := api.FencingRequests().List(ctx, metav1.ListOptions{})
	if isNoAPI(err) {
		return nil
	}
	if err != nil {
		return permissionHint(err, "list", "fencingrequests.fenceline.io")
	}
	s.FencingAPI = true
	s.Requests = pointers(reqs.Items)
	policies, err := api.FencePolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		return permissionHint(err, "list", "fencepolicies.fenceline.io")
	}
	s.Policies = pointers(policies.Items)
	classes, err := api.FenceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return permissionHint(err, "list", "fenceclasses.fenceline.io")
	}
	s.Classes = pointers(classes.Items)
	return nil
}

// readStorageFences reads the StorageFences for status: none where their
// CRD is not installed (an older one), and a note instead of a failure
// where the user may not list them (the operators' role of
// docs/kubectl-plugin.md has no such rule).
func (s *Snapshot) readStorageFences(ctx context.Context, c fencingclient.Interface) error {
	sfs, err := c.FencingV1alpha1().StorageFences().List(ctx, metav1.ListOptions{})
	switch {
	case isNoAPI(err):
		s.StorageFencesNote = "the StorageFence API is not installed"
		return nil
	case apierrors.IsForbidden(err):
		s.StorageFencesNote = "not allowed to list storagefences.fenceline.io"
		return nil
	case err != nil:
		return permissionHint(err, "list", "storagefences.fenceline.io")
	}
	s.StorageFences = pointers(sfs.Items)
	return nil
}

// Node returns the named node, or nil.
func (s *Snapshot) Node(name string) *v1.Node {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Driver returns the named CSIDriver, or nil.
func (s *Snapshot) Driver(name string) *storagev1.CSIDriver {
	for _, d := range s.Drivers {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// RequestsOf returns the FencingRequests for the node (by spec.nodeName, as
// the controller finds them: a human's request need not carry the label).
func (s *Snapshot) RequestsOf(node string) []*fencingv1alpha1.FencingRequest {
	var out []*fencingv1alpha1.FencingRequest
	for _, r := range s.Requests {
		if r.Spec.NodeName == node {
			out = append(out, r.DeepCopy())
		}
	}
	return out
}

// VAsOf returns the VolumeAttachments for the node.
func (s *Snapshot) VAsOf(node string) []*storagev1.VolumeAttachment {
	var out []*storagev1.VolumeAttachment
	for _, va := range s.VolumeAttachments {
		if va.Spec.NodeName == node {
			out = append(out, va)
		}
	}
	return out
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
