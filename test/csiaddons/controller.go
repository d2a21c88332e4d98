package csiaddons

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/api/csiaddons/fence"
	"fenceline.io/fenceline/mock-driver/api/csiaddons/identity"
)

// DefaultTimeout is the time limit of one fence or unfence call, the
// csi-addons controller's default.
const DefaultTimeout = 3 * time.Minute

// Options configure the controller.
type Options struct {
	// Drivers maps a CSI driver name to the endpoint of its csi-addons
	// socket: "unix:///path", a bare "/path", or "tcp://host:port" (the
	// mock driver's --csi-addons-endpoint). A NetworkFence for a driver
	// not listed is retried until it is (the real controller waits the
	// same way for a csi-addons sidecar of the driver to register).
	Drivers map[string]string
	// Timeout limits each fence or unfence call; DefaultTimeout when zero.
	Timeout time.Duration
	// Workers is how many NetworkFences are handled at once; 1 when zero.
	Workers int
	// RetryBaseDelay and RetryMaxDelay bound the exponential back-off of
	// a NetworkFence whose handling failed; 5ms and 1000s (controller-
	// runtime's defaults) when zero.
	RetryBaseDelay, RetryMaxDelay time.Duration
}

// Run runs the controller against the cluster of cfg until ctx ends. It
// reads Secrets with a clientset and everything else with a dynamic
// client. The logger comes from ctx (klog.FromContext).
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a clientset: %w", err)
	}
	return New(dyn, kube, opts).Run(ctx)
}

// Controller is the stand-in csi-addons NetworkFence controller.
type Controller struct {
	dyn   dynamic.Interface
	kube  kubernetes.Interface
	opts  Options
	queue workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	conns map[string]*driverConn // by driver name
}

// driverConn is a connection to a driver's csi-addons socket, with
// whether it announced NETWORK_FENCE.
type driverConn struct {
	cc           *grpc.ClientConn
	networkFence bool
}

// New returns a controller that works through the given clients; Run
// starts it.
func New(dyn dynamic.Interface, kube kubernetes.Interface, opts Options) *Controller {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.RetryBaseDelay <= 0 {
		opts.RetryBaseDelay = 5 * time.Millisecond
	}
	if opts.RetryMaxDelay <= 0 {
		opts.RetryMaxDelay = 1000 * time.Second
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBaseDelay, opts.RetryMaxDelay)
	return &Controller{
		dyn:   dyn,
		kube:  kube,
		opts:  opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "networkfence"}),
		conns: map[string]*driverConn{},
	}
}

// Run watches NetworkFences and handles them until ctx ends; it returns
// nil then, or an error if the informer could not sync.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("networkfence")
	ctx = klog.NewContext(ctx, logger)
	defer c.closeConns()
	defer c.queue.ShutDown()

	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, 0)
	informer := factory.ForResource(NetworkFenceResource)
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		// Only spec changes (and the deletion, which bumps the generation
		// of an object with finalizers) are handled, as the real
		// controller's GenerationChangedPredicate does: its status updates
		// start nothing; its finalizer update does when it fills the spec
		// (roundTripSpec).
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*unstructured.Unstructured)
			n, ok2 := newObj.(*unstructured.Unstructured)
			if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() {
				return
			}
			c.enqueue(newObj)
		},
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return fmt.Errorf("watching NetworkFences: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the NetworkFence informer did not sync")
	}
	logger.Info("Started", "drivers", c.opts.Drivers)
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) worker(ctx context.Context) {
	for c.process(ctx) {
	}
}

// process handles one key: forgotten on success, re-queued with back-off
// on error.
func (c *Controller) process(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.FromContext(ctx).WithValues("networkFence", key)
	if err := c.sync(klog.NewContext(ctx, logger), key); err != nil {
		logger.Error(err, "Handling the NetworkFence failed; retrying")
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync is the real controller's reconcile of one NetworkFence.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	// Read from the API server, not the informer's cache: the cache may
	// lag behind the controller's own last update, which would make the
	// next write conflict.
	u, err := c.dyn.Resource(NetworkFenceResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.GetDeletionTimestamp() != nil {
		// The real controller only lets go: it does not unfence.
		if slices.Contains(u.GetFinalizers(), Finalizer) {
			u.SetFinalizers(slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == Finalizer }))
			if _, err := c.dyn.Resource(NetworkFenceResource).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("removing the finalizer %s: %w", Finalizer, err)
			}
			logger.Info("Removed the finalizer; the storage fence stays")
		}
		return nil
	}

	nf, err := NetworkFenceFrom(u)
	if err == nil {
		err = validateSpec(nf)
	}
	if err != nil {
		logger.Error(err, "Invalid NetworkFence; not retried")
		return c.fail(ctx, u, fmt.Sprintf("Failed to validate Networkfence parameters: %v", err), nil)
	}

	req, driver, err := c.request(ctx, nf)
	if err != nil {
		return err
	}
	client, err := c.client(ctx, driver)
	if err != nil {
		return fmt.Errorf("failed to get networkfenceclient using driver %q due to error: %w", driver, err)
	}

	if !slices.Contains(u.GetFinalizers(), Finalizer) {
		withFinalizer := u.DeepCopy()
		withFinalizer.SetFinalizers(append(withFinalizer.GetFinalizers(), Finalizer))
		// The real controller writes its typed object back, whose spec
		// always carries driver and secret: the finalizer's update changes
		// the spec of a NetworkFence made without them, bumps the
		// generation and has the object handled (and the driver called)
		// once more.
		roundTripSpec(withFinalizer)
		updated, err := c.dyn.Resource(NetworkFenceResource).Update(ctx, withFinalizer, metav1.UpdateOptions{})
		if err != nil {
			err = fmt.Errorf("failed to add finalizer (%s) to NetworkFence resource (%s): %w", Finalizer, name, err)
			return c.fail(ctx, u, err.Error(), err)
		}
		u = updated
	}

	fenced := state(nf) == Fenced
	logger = logger.WithValues("driver", driver, "cidrs", nf.Spec.Cidrs, "fenced", fenced)
	if err := c.call(ctx, client, fenced, req); err != nil {
		logger.Error(err, "The fence call failed")
		return c.fail(ctx, u, err.Error(), err)
	}
	msg := FenceOperationSuccessfulMessage
	if !fenced {
		msg = UnfenceOperationSuccessfulMessage
	}
	logger.Info("Done", "message", msg)
	return c.setStatus(ctx, u, FencingOperationResultSucceeded, msg)
}

// validateSpec is the real controller's check, which the CRD's validation
// cannot make, plus the fence state, which the CRD's enum and default make
// for an API server but not for a client that skips them.
func validateSpec(nf *NetworkFence) error {
	switch nf.Spec.FenceState {
	case "", Fenced, Unfenced:
	default:
		return fmt.Errorf("unknown fenceState %q: want %s or %s", nf.Spec.FenceState, Fenced, Unfenced)
	}
	if nf.Spec.NetworkFenceClassName != "" {
		if nf.Spec.Cidrs == nil {
			return errors.New("required parameter spec.cidrs is not specified")
		}
		return nil
	}
	if nf.Spec.Driver == "" {
		return errors.New("required parameter driver is not specified")
	}
	if nf.Spec.Cidrs == nil {
		return errors.New("required parameter cidrs is not specified")
	}
	return nil
}

// state is the fence state asked for; empty is the CRD's default, Fenced.
func state(nf *NetworkFence) FenceState {
	if nf.Spec.FenceState == "" {
		return Fenced
	}
	return nf.Spec.FenceState
}

// fenceRequest is what both calls carry.
type fenceRequest struct {
	parameters map[string]string
	secrets    map[string]string
	cidrs      []*fence.CIDR
	// secretErr is why the Secret could not be read: the call then fails
	// with it, InvalidArgument, as the csi-addons sidecar answers.
	secretErr error
}

// request resolves the driver, parameters and secret of nf (from its
// NetworkFenceClass, or from its deprecated fields) and reads the Secret.
// A missing class is an error (retried, status untouched); a missing or
// unnamed Secret is recorded in the request, whose call then fails.
func (c *Controller) request(ctx context.Context, nf *NetworkFence) (*fenceRequest, string, error) {
	driver := nf.Spec.Driver
	params := maps.Clone(nf.Spec.Parameters)
	var secret SecretSpec
	if nf.Spec.Secret != nil {
		secret = *nf.Spec.Secret
	}
	if name := nf.Spec.NetworkFenceClassName; name != "" {
		u, err := c.dyn.Resource(NetworkFenceClassResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, "", fmt.Errorf("failed to get networkfenceclass with name %q due to error: %w", name, err)
		}
		class, err := NetworkFenceClassFrom(u)
		if err != nil {
			return nil, "", fmt.Errorf("decoding networkfenceclass %q: %w", name, err)
		}
		driver = class.Spec.Provisioner
		secret = SecretSpec{Name: class.Spec.Parameters[SecretNameParameter], Namespace: class.Spec.Parameters[SecretNamespaceParameter]}
		if params == nil {
			params = map[string]string{}
		}
		for k, v := range class.Spec.Parameters {
			if k != SecretNameParameter && k != SecretNamespaceParameter {
				params[k] = v
			}
		}
	} else {
		klog.FromContext(ctx).Info("WARNING: Specifying driver, secrets and parameters inside NetworkFence is deprecated, please use NetworkFenceClass instead")
	}
	req := &fenceRequest{parameters: params}
	for _, cidr := range nf.Spec.Cidrs {
		req.cidrs = append(req.cidrs, &fence.CIDR{Cidr: cidr})
	}
	if secret.Name == "" {
		// Reading a Secret without a name fails, in the sidecar too.
		req.secretErr = status.Error(codes.InvalidArgument, "resource name may not be empty")
		return req, driver, nil
	}
	s, err := c.kube.CoreV1().Secrets(secret.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		req.secretErr = status.Error(codes.InvalidArgument, err.Error())
		return req, driver, nil
	}
	req.secrets = map[string]string{}
	for k, v := range s.Data {
		req.secrets[k] = string(v)
	}
	return req, driver, nil
}

// client returns the connection to driver's csi-addons socket, checking
// once that it announces NETWORK_FENCE.
func (c *Controller) client(ctx context.Context, driver string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dc := c.conns[driver]
	if dc == nil {
		ep, ok := c.opts.Drivers[driver]
		if !ok {
			return nil, fmt.Errorf("no csi-addons endpoint known for driver %q", driver)
		}
		cc, err := grpc.NewClient(target(ep), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", ep, err)
		}
		dc = &driverConn{cc: cc}
		c.conns[driver] = dc
	}
	if !dc.networkFence {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		caps, err := identity.NewIdentityClient(dc.cc).GetCapabilities(ctx, &identity.GetCapabilitiesRequest{})
		if err != nil {
			return nil, fmt.Errorf("reading the csi-addons capabilities: %w", err)
		}
		for _, cp := range caps.GetCapabilities() {
			if cp.GetNetworkFence().GetType() == identity.Capability_NetworkFence_NETWORK_FENCE {
				dc.networkFence = true
			}
		}
		if !dc.networkFence {
			return nil, fmt.Errorf("driver %q does not support NetworkFence", driver)
		}
	}
	return dc.cc, nil
}

// target turns an endpoint into a gRPC dial target.
func target(ep string) string {
	switch {
	case strings.HasPrefix(ep, "/"):
		return "unix://" + ep
	case strings.HasPrefix(ep, "tcp://"):
		return strings.TrimPrefix(ep, "tcp://")
	}
	return ep
}

func (c *Controller) closeConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, dc := range c.conns {
		_ = dc.cc.Close()
	}
	c.conns = map[string]*driverConn{}
}

// call makes the fence or unfence call, or fails as the sidecar does when
// the Secret could not be read.
func (c *Controller) call(ctx context.Context, cc *grpc.ClientConn, fenced bool, req *fenceRequest) error {
	if req.secretErr != nil {
		return req.secretErr
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	fc := fence.NewFenceControllerClient(cc)
	var err error
	if fenced {
		_, err = fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Parameters: req.parameters, Secrets: req.secrets, Cidrs: req.cidrs})
	} else {
		_, err = fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Parameters: req.parameters, Secrets: req.secrets, Cidrs: req.cidrs})
	}
	return err
}

// fail writes result Failed with msg and returns retry: nil for a spec
// that will not get better, the error to retry with otherwise.
func (c *Controller) fail(ctx context.Context, u *unstructured.Unstructured, msg string, retry error) error {
	if err := c.setStatus(ctx, u, FencingOperationResultFailed, msg); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to update the NetworkFence status")
		if retry == nil {
			return err
		}
	}
	return retry
}

// setStatus replaces status.result and status.message, keeping the
// conditions.
func (c *Controller) setStatus(ctx context.Context, u *unstructured.Unstructured, result FencingOperationResult, msg string) error {
	u = u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, string(result), "status", "result"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u.Object, msg, "status", "message"); err != nil {
		return err
	}
	_, err := c.dyn.Resource(NetworkFenceResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// roundTripSpec sets the spec fields the real controller's Go types always
// write (driver and secret, without omitempty on driver), as its update
// of a typed object does.
func roundTripSpec(u *unstructured.Unstructured) {
	if _, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "driver"); !ok {
		_ = unstructured.SetNestedField(u.Object, "", "spec", "driver")
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "secret"); !ok {
		_ = unstructured.SetNestedMap(u.Object, map[string]any{}, "spec", "secret")
	}
}
