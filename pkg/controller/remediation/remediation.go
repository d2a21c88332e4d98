// Package remediation is fenceline-controller's remediation controller:
// Fenceline as a remediator of the external-remediation contract that
// medik8s NodeHealthCheck and Cluster API's MachineHealthCheck share. For
// each FencelineRemediation a checker creates, it creates one approved
// FencingRequest for the node (node-fencing then fences it as any other
// request), mirrors the request's phase into the contract's conditions
// (Processing, Succeeded), and, when the checker deletes the remediation,
// cancels the request if node-fencing has not admitted it yet; a fence in
// progress is never stopped.
//
// One sync per remediation (namespace/name): Decide on the caches, and
// the same Decide on fresh reads right before a write.
package remediation

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name in --controllers.
const Name = "remediation"

// Events on a FencelineRemediation.
const (
	// EventRequestCreated (Normal): the FencingRequest was created.
	EventRequestCreated = "FencelineFencingRequested"
	// EventCancelAsked (Normal): its request was asked to cancel.
	EventCancelAsked = "FencelineFencingCancelAsked"
	// EventReleased (Normal): the finalizer was removed; says what became
	// of the request.
	EventReleased = "FencelineRemediationReleased"
	// EventSucceeded (Normal) and EventFailed (Warning): Succeeded became
	// True or False.
	EventSucceeded = "FencelineRemediationSucceeded"
	EventFailed    = "FencelineRemediationFailed"
)

// unknownNodeRecheck is how often a remediation whose node is not known
// (no Node yet, a Machine without status.nodeRef) is looked at again.
const unknownNodeRecheck = 30 * time.Second

// changedDecisionRecheck is when a remediation whose decision changed on
// fresh reads is looked at again.
const changedDecisionRecheck = time.Second

// Config wires the controller.
type Config struct {
	// Informers give the Nodes; Fencing the remediations and requests.
	Informers informers.SharedInformerFactory
	Fencing   fencinginformers.SharedInformerFactory
	// Client writes requests and remediations (JSON content type) and
	// makes the fresh reads; Kube reads Nodes fresh.
	Client versioned.Interface
	Kube   kubernetes.Interface
	// Machines finds the node of a Cluster API Machine; nil treats every
	// Machine's node as unknown.
	Machines MachineNodes
	// Recorder records Events on remediations.
	Recorder record.EventRecorder
	// Namespaces are the namespaces whose remediations are acted on
	// (Settings.Namespaces); nil acts on none.
	Namespaces []string
	// DryRun logs each write instead of making it.
	DryRun bool
	// Now is time.Now when nil.
	Now func() time.Time
}

// Controller is the remediation controller.
type Controller struct {
	cfg          Config
	remediations fencinglisters.FencelineRemediationLister
	byRequest    cache.Indexer
	requests     fencinglisters.FencingRequestLister
	nodes        corelisters.NodeLister
	queue        *keyloop.Loop[string]
}

// New wires the controller to the shared informers; call it before they
// start. The fencing API must be served.
func New(cfg Config) (*Controller, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fv := cfg.Fencing.Fencing().V1alpha1()
	remInf := fv.FencelineRemediations().Informer()
	if err := remInf.AddIndexers(cache.Indexers{requestKeyIndex: remediationRequestKeys}); err != nil {
		return nil, fmt.Errorf("adding FencelineRemediation index: %w", err)
	}
	c := &Controller{
		cfg:          cfg,
		remediations: fv.FencelineRemediations().Lister(),
		byRequest:    remInf.GetIndexer(),
		requests:     fv.FencingRequests().Lister(),
		nodes:        cfg.Informers.Core().V1().Nodes().Lister(),
	}
	c.queue = keyloop.New(keyloop.Config{Name: Name, KeyName: "remediation", BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Minute}, c.sync)
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if err := nodequeue.AddHandler(remInf, "FencelineRemediation", cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	request := func(obj any) {
		if req, ok := nodequeue.DeletedObject[*fencingv1alpha1.FencingRequest](obj); ok {
			c.enqueueFor(req)
		}
	}
	if err := nodequeue.AddHandler(fv.FencingRequests().Informer(), "FencingRequest", cache.ResourceEventHandlerFuncs{
		AddFunc: request, UpdateFunc: func(_, cur any) { request(cur) }, DeleteFunc: request,
	}); err != nil {
		return nil, err
	}
	// The Node lister is read, not watched: a remediation whose Node does
	// not exist yet is looked at again after unknownNodeRecheck.
	cfg.Informers.Core().V1().Nodes().Informer()
	return c, nil
}

// requestKeyIndex indexes remediations by the keys a FencingRequest finds
// them under: their UID, and each name their node goes by.
const requestKeyIndex = "requestKey"

func uidKey(uid string) string   { return "uid/" + uid }
func nodeKey(node string) string { return "node/" + node }

// remediationRequestKeys are a remediation's requestKeyIndex keys.
func remediationRequestKeys(obj any) ([]string, error) {
	r, ok := obj.(*fencingv1alpha1.FencelineRemediation)
	if !ok {
		return nil, nil
	}
	keys := []string{uidKey(string(r.UID)), nodeKey(nhcNodeName(r))}
	if n := r.Status.NodeName; n != "" && n != nhcNodeName(r) {
		keys = append(keys, nodeKey(n))
	}
	return keys, nil
}

// enqueueFor enqueues the remediations a request concerns.
func (c *Controller) enqueueFor(req *fencingv1alpha1.FencingRequest) {
	for _, key := range c.remediationsOf(req) {
		c.queue.Add(key)
	}
}

// remediationsOf returns the keys of the remediations a request concerns:
// the one that created it, and every one of its node.
func (c *Controller) remediationsOf(req *fencingv1alpha1.FencingRequest) []string {
	idx := []string{nodeKey(req.Spec.NodeName)}
	if uid := req.Labels[RemediationUIDLabel]; uid != "" {
		idx = append(idx, uidKey(uid))
	}
	var keys []string
	for _, k := range idx {
		objs, err := c.byRequest.ByIndex(requestKeyIndex, k)
		if err != nil {
			return keys
		}
		for _, obj := range objs {
			if r, ok := obj.(*fencingv1alpha1.FencelineRemediation); ok && !slices.Contains(keys, r.Namespace+"/"+r.Name) {
				keys = append(keys, r.Namespace+"/"+r.Name)
			}
		}
	}
	return keys
}

// Run processes remediations until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.queue.Run(ctx, workers)
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	if !slices.Contains(c.cfg.Namespaces, ns) {
		klog.FromContext(ctx).V(2).Info("Ignoring a remediation outside --remediation-namespaces")
		return 0, nil
	}
	rem, err := c.remediations.FencelineRemediations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	in, err := c.cachedInput(ctx, rem)
	if err != nil {
		return 0, err
	}
	d := Decide(in)
	logger := klog.FromContext(ctx)
	if d.Action != ActNone {
		return c.act(ctx, rem, d)
	}
	logger.V(4).Info("Remediation", "why", d.Why)
	if rem.DeletionTimestamp == nil {
		if err := c.writeStatus(ctx, in, d); err != nil {
			return 0, err
		}
	}
	if d.Request == nil && (in.NodeName == "" || in.Node == nil) {
		return unknownNodeRecheck, nil
	}
	return 0, nil
}

// cachedInput reads the decision's input from the caches; a Machine's node
// is read from the API server (no Machine is cached).
func (c *Controller) cachedInput(ctx context.Context, rem *fencingv1alpha1.FencelineRemediation) (Input, error) {
	in := Input{Remediation: rem}
	var err error
	if in.NodeName, in.NodeProblem, err = c.nodeName(ctx, rem); err != nil {
		return in, err
	}
	if in.NodeName != "" {
		node, err := c.nodes.Get(in.NodeName)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return in, err
		default:
			in.Node = node
		}
	}
	for _, sel := range requestSelectors(rem, in.NodeName) {
		reqs, err := c.requests.List(sel)
		if err != nil {
			return in, err
		}
		in.addRequests(reqs...)
	}
	return in, nil
}

// freshInput reads the same input from the API server: the remediation,
// its node and the requests, each with a read of its own.
func (c *Controller) freshInput(ctx context.Context, ns, name string) (Input, error) {
	rem, err := c.cfg.Client.FencingV1alpha1().FencelineRemediations(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Input{}, fmt.Errorf("reading FencelineRemediation %s/%s: %w", ns, name, err)
	}
	in := Input{Remediation: rem}
	if in.NodeName, in.NodeProblem, err = c.nodeName(ctx, rem); err != nil {
		return in, err
	}
	if in.NodeName != "" {
		node, err := c.cfg.Kube.CoreV1().Nodes().Get(ctx, in.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return in, fmt.Errorf("reading Node %s: %w", in.NodeName, err)
		default:
			in.Node = node
		}
	}
	for _, sel := range requestSelectors(rem, in.NodeName) {
		list, err := c.cfg.Client.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return in, fmt.Errorf("listing FencingRequests: %w", err)
		}
		for i := range list.Items {
			in.addRequests(&list.Items[i])
		}
	}
	return in, nil
}

// addRequests adds the requests not in in.Requests yet: a request of the
// remediation's node that carries its UID is selected twice.
func (in *Input) addRequests(reqs ...*fencingv1alpha1.FencingRequest) {
	for _, r := range reqs {
		if !slices.ContainsFunc(in.Requests, func(o *fencingv1alpha1.FencingRequest) bool { return o.Name == r.Name }) {
			in.Requests = append(in.Requests, r)
		}
	}
}

// requestSelectors select the remediation's own requests and its node's.
func requestSelectors(rem *fencingv1alpha1.FencelineRemediation, node string) []labels.Selector {
	out := []labels.Selector{labels.SelectorFromSet(labels.Set{RemediationUIDLabel: string(rem.UID)})}
	if node != "" {
		out = append(out, labels.SelectorFromSet(labels.Set{names.FencingRequestNodeLabel: fencingreq.NodeLabelValue(node)}))
	}
	return out
}

// act re-decides on fresh reads and makes the write only if the fresh
// decision is the same; a changed decision is looked at again at once.
func (c *Controller) act(ctx context.Context, rem *fencingv1alpha1.FencelineRemediation, cached Decision) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	in, err := c.freshInput(ctx, rem.Namespace, rem.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	d := Decide(in)
	if d.Action != cached.Action {
		// Looked at again once the caches have caught up with what the
		// fresh reads showed.
		logger.V(2).Info("Not acting: the decision changed on fresh data", "cached", cached.Action, "fresh", d.Action, "why", d.Why)
		return changedDecisionRecheck, nil
	}
	fresh := in.Remediation
	if c.cfg.DryRun {
		logger.Info("Dry run: not acting on the remediation", "action", d.Action, "why", d.Why)
		return 0, nil
	}
	logger.Info("Remediation", "action", d.Action, "why", d.Why)
	client := c.cfg.Client.FencingV1alpha1()
	switch d.Action {
	case ActAddFinalizer:
		u := fresh.DeepCopy()
		u.Finalizers = append(u.Finalizers, Finalizer)
		if _, err := client.FencelineRemediations(u.Namespace).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("adding the finalizer to FencelineRemediation %s/%s: %w", u.Namespace, u.Name, err)
		}
	case ActRemoveFinalizer:
		u := fresh.DeepCopy()
		u.Finalizers = slices.DeleteFunc(u.Finalizers, func(f string) bool { return f == Finalizer })
		if _, err := client.FencelineRemediations(u.Namespace).Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("removing the finalizer of FencelineRemediation %s/%s: %w", u.Namespace, u.Name, err)
		}
		c.cfg.Recorder.Eventf(fresh, v1.EventTypeNormal, EventReleased, "%s", d.Why)
	case ActCreate:
		req := &fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: fencingreq.GenerateName(in.NodeName),
				Labels: map[string]string{
					names.FencingRequestNodeLabel: fencingreq.NodeLabelValue(in.NodeName),
					RemediationUIDLabel:           string(fresh.UID),
				},
			},
			Spec: fencingv1alpha1.FencingRequestSpec{
				NodeName: in.NodeName, NodeUID: in.Node.UID, PolicyName: fresh.Spec.PolicyName,
				Reason: ReasonExternalRemediation, Requester: Requester(fresh),
				Action: fencingv1alpha1.FenceActionOff, Approved: ptr.To(true),
			},
		}
		created, err := client.FencingRequests().Create(ctx, req, metav1.CreateOptions{})
		if err != nil {
			return 0, fmt.Errorf("creating a FencingRequest for node %s: %w", in.NodeName, err)
		}
		logger.Info("Created FencingRequest", "request", created.Name, "node", in.NodeName)
		c.cfg.Recorder.Eventf(fresh, v1.EventTypeNormal, EventRequestCreated, "FencingRequest %s for node %s: %s", created.Name, in.NodeName, d.Why)
	case ActCancel:
		// The update carries the fresh read's resourceVersion: a request
		// that node-fencing admitted since is not touched (conflict).
		u := d.Request.DeepCopy()
		metav1.SetMetaDataAnnotation(&u.ObjectMeta, names.UnfenceAnnotation, Requester(fresh))
		if _, err := client.FencingRequests().Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("asking FencingRequest %s to cancel: %w", u.Name, err)
		}
		c.cfg.Recorder.Eventf(fresh, v1.EventTypeNormal, EventCancelAsked, "%s", d.Why)
	}
	return 0, nil
}

// writeStatus writes the decision's status when it changed, keeping each
// condition's lastTransitionTime while its status stays, and records an
// Event when Succeeded becomes True or False.
func (c *Controller) writeStatus(ctx context.Context, in Input, d Decision) error {
	rem := in.Remediation
	want := Status(in, d)
	now := metav1.NewTime(c.cfg.Now())
	next := rem.Status.DeepCopy()
	next.NodeName, next.FencingRequestName, next.Phase = want.NodeName, want.FencingRequestName, want.Phase
	for _, cond := range want.Conditions {
		cond.ObservedGeneration = rem.Generation
		cond.LastTransitionTime = now
		meta.SetStatusCondition(&next.Conditions, cond)
	}
	next.LastUpdateTime = rem.Status.LastUpdateTime
	if equality.Semantic.DeepEqual(*next, rem.Status) {
		return nil
	}
	next.LastUpdateTime = &now
	if c.cfg.DryRun {
		klog.FromContext(ctx).Info("Dry run: not writing the remediation's status")
		return nil
	}
	before := meta.FindStatusCondition(rem.Status.Conditions, fencingv1alpha1.RemediationSucceeded)
	after := meta.FindStatusCondition(next.Conditions, fencingv1alpha1.RemediationSucceeded)
	updated := rem.DeepCopy()
	updated.Status = *next
	if _, err := c.cfg.Client.FencingV1alpha1().FencelineRemediations(rem.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of FencelineRemediation %s/%s: %w", rem.Namespace, rem.Name, err)
	}
	if after != nil && (before == nil || before.Status != after.Status) {
		switch after.Status {
		case metav1.ConditionTrue:
			c.cfg.Recorder.Eventf(rem, v1.EventTypeNormal, EventSucceeded, "%s", after.Message)
		case metav1.ConditionFalse:
			c.cfg.Recorder.Eventf(rem, v1.EventTypeWarning, EventFailed, "%s", after.Message)
		}
	}
	return nil
}
