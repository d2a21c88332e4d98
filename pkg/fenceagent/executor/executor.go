// Package executor is the fence agent's executor: it carries out the
// FencingRequests that fenceline-controller admitted (phase Fencing,
// condition Required=True). For each, it runs rounds through the policy's
// levels in ascending index, powers the node off with every FenceClass of
// a level, and records each try as a FenceAttempt in the request's status,
// Succeeded only with the power read back Off. It writes only
// status.attempts and status.failedRounds; the controller reads them,
// marks the request Fenced once a level is proven, and Failed after the
// policy's maxAttempts failed rounds. Decide says what to do next; the
// rest carries it out.
package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/queue"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions/fencing/v1alpha1"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
)

// Name is the controller's name in logs and workqueue metrics.
const Name = "fencing-executor"

// fieldManager names the executor in managedFields.
const fieldManager = "fenceline-fence-agent"

// Config wires a Controller.
type Config struct {
	Client   versioned.Interface
	Requests fencinginformers.FencingRequestInformer
	Policies fencinginformers.FencePolicyInformer
	Targets  fencinginformers.FenceTargetInformer
	Classes  fencinginformers.FenceClassInformer
	// Nodes are read for their UID and labels only.
	Nodes coreinformers.NodeInformer
	// Secrets watches CredentialsNamespace only: credential Secrets must
	// live there.
	Secrets              coreinformers.SecretInformer
	CredentialsNamespace string
	Recorder             record.EventRecorder
	Metrics              *Metrics
	// Build and Now are for tests; nil means devices.Build and time.Now.
	Build devices.BuildFunc
	Now   func() time.Time
}

// Controller executes admitted FencingRequests.
type Controller struct {
	cfg      Config
	requests fencinglisters.FencingRequestLister
	policies fencinglisters.FencePolicyLister
	targets  fencinglisters.FenceTargetLister
	nodes    corelisters.NodeLister
	source   devices.Source
	queue    *queue.Queue
	synced   []cache.InformerSynced
}

// New creates the controller and registers its informer handlers; call it
// before the informers start.
func New(cfg Config) (*Controller, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{
		cfg:      cfg,
		requests: cfg.Requests.Lister(),
		policies: cfg.Policies.Lister(),
		targets:  cfg.Targets.Lister(),
		nodes:    cfg.Nodes.Lister(),
		source:   devices.Source{Classes: cfg.Classes.Lister(), Secrets: cfg.Secrets.Lister(), Namespace: cfg.CredentialsNamespace, Build: cfg.Build},
	}
	c.queue = queue.New(Name, "fencingRequest", c.sync)
	all := func(*fencingv1alpha1.FencingRequest) bool { return true }
	var err error
	c.synced, err = queue.AddHandlers(Name,
		queue.Watch{Informer: cfg.Requests.Informer(), Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: c.queue.Enqueue, UpdateFunc: func(_, cur any) { c.queue.Enqueue(cur) }, DeleteFunc: c.queue.Enqueue}},
		queue.Watch{Informer: cfg.Policies.Informer(), Handler: queue.OnChange(func(metav1.Object) { c.enqueueFencing(all) })},
		queue.Watch{Informer: cfg.Nodes.Informer(), Handler: queue.OnChange(func(n metav1.Object) {
			c.enqueueFencing(func(r *fencingv1alpha1.FencingRequest) bool { return r.Spec.NodeName == n.GetName() })
		})},
		// Read when a round runs; a change starts nothing by itself.
		queue.Watch{Informer: cfg.Targets.Informer()},
		queue.Watch{Informer: cfg.Classes.Informer()},
		queue.Watch{Informer: cfg.Secrets.Informer()})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// enqueueFencing queues the requests in phase Fencing for which match.
func (c *Controller) enqueueFencing(match func(*fencingv1alpha1.FencingRequest) bool) {
	reqs, err := c.requests.List(labels.Everything())
	if err != nil {
		return
	}
	for _, r := range reqs {
		if r.Status.Phase == fencingv1alpha1.FencingPhaseFencing && match(r) {
			c.queue.Add(r.Name)
		}
	}
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.queue.Run(ctx, workers, c.synced, "Executing FencingRequests")
}

// Sync handles one request now; exported for tests.
func (c *Controller) Sync(ctx context.Context, name string) error { return c.sync(ctx, name) }

// sync decides what to do for the request name and does it. The cache
// may not show this agent's last writes yet, and a stale cache must
// neither skip a backoff nor take a finished attempt for an interrupted
// one:
//   - a round is run on the cached request and its first write, the start
//     of its first attempt, is made on that version alone: the API server
//     refuses it if the request changed since (errStale), before any power
//     action, and sync then decides again on the request read fresh and
//     acts on that (a round's first write then made on that version; a
//     second refusal is returned, and the request requeued). A current
//     cache saves a read; a stale one costs the refused write.
//   - marking attempts interrupted is decided again on a fresh read first.
//   - a cached request without a resourceVersion gives the write nothing
//     to be refused on: it is read fresh before a round too.
func (c *Controller) sync(ctx context.Context, name string) error {
	req, err := c.requests.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("getting FencingRequest %s: %w", name, err)
	}
	logger := klog.FromContext(ctx).WithValues("fencingRequest", name, "node", req.Spec.NodeName)
	ctx = klog.NewContext(ctx, logger)
	node, err := c.node(req.Spec.NodeName)
	if err != nil {
		return err
	}
	policy, err := c.policyFor(req, node)
	if err != nil {
		return err
	}
	d := Decide(req, policy, node, c.cfg.Now())
	if d.Action == ActionMarkInterrupted || (d.Action == ActionRunRound && req.ResourceVersion == "") {
		if req, d, err = c.decideFresh(ctx, name, policy, node); err != nil || req == nil {
			return err
		}
	}
	err = c.act(ctx, req, policy, d)
	if !errors.Is(err, errStale) {
		return err
	}
	logger.V(2).Info("The round was decided on a stale request; deciding again on a fresh read", "resourceVersion", req.ResourceVersion)
	if req, d, err = c.decideFresh(ctx, name, policy, node); err != nil || req == nil {
		return err
	}
	return c.act(ctx, req, policy, d)
}

// decideFresh reads the request from the API server and decides on it;
// the request is nil when it is gone.
func (c *Controller) decideFresh(ctx context.Context, name string, policy *fencingv1alpha1.FencePolicy, node *corev1.Node) (*fencingv1alpha1.FencingRequest, Decision, error) {
	req, err := c.cfg.Client.FencingV1alpha1().FencingRequests().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, Decision{}, nil
	} else if err != nil {
		return nil, Decision{}, fmt.Errorf("getting FencingRequest %s: %w", name, err)
	}
	return req, Decide(req, policy, node, c.cfg.Now()), nil
}

// act carries out d, decided on req. A round returns errStale when req
// was not the latest version; nothing was powered then.
func (c *Controller) act(ctx context.Context, req *fencingv1alpha1.FencingRequest, policy *fencingv1alpha1.FencePolicy, d Decision) error {
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Decided", "action", d.Action, "reason", d.Reason, "message", d.Message, "resourceVersion", req.ResourceVersion)
	switch d.Action {
	case ActionRefuse:
		logger.Info("Refusing to fence", "reason", d.Reason, "message", d.Message)
		c.cfg.Recorder.Eventf(req, corev1.EventTypeWarning, EventRefused, "Not fencing node %s (%s): %s", req.Spec.NodeName, d.Reason, d.Message)
	case ActionRetryAfter:
		c.queue.AddAfter(req.Name, d.RetryAfter)
	case ActionMarkInterrupted:
		if err := c.markInterrupted(ctx, req.Name); err != nil {
			return err
		}
		logger.Info("Marked interrupted attempts failed", "message", d.Message)
		c.cfg.Recorder.Eventf(req, corev1.EventTypeWarning, EventAttemptFailed, "%s: %s", d.Message, InterruptedMessage)
		c.queue.Add(req.Name)
	case ActionRunRound:
		return c.runRound(ctx, req, policy)
	}
	return nil
}

// node is the Node name from the cache, nil when missing.
func (c *Controller) node(name string) (*corev1.Node, error) {
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("getting Node %s: %w", name, err)
	}
	return n, nil
}

// policyFor is the request's policy, resolved as the controller resolves
// it (fencingreq.ResolvePolicy): the one it names, or else the only one
// whose nodeSelector selects the node. nil when there is no such policy
// (none, several, or no node to match).
func (c *Controller) policyFor(req *fencingv1alpha1.FencingRequest, node *corev1.Node) (*fencingv1alpha1.FencePolicy, error) {
	all, err := c.policies.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing FencePolicies: %w", err)
	}
	p, _ := fencingreq.ResolvePolicy(node, req.Spec.PolicyName, all)
	return p, nil
}
