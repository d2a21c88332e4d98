package networkfence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ErrNotServed: the API server does not serve the NetworkFence kinds
// (csi-addons is not installed). No NetworkFence can exist then.
var ErrNotServed = errors.New("the csi-addons NetworkFence API (csiaddons.openshift.io/v1alpha1 networkfences, networkfenceclasses) is not served: install csi-addons")

// Reader reads the NetworkFences of FencingRequests and NetworkFenceClasses.
type Reader interface {
	// FencesOf returns the NetworkFences labelled with the request's UID;
	// ErrNotServed when the API is not served.
	FencesOf(ctx context.Context, request types.UID) ([]Fence, error)
	// Class returns the NetworkFenceClass, nil when it does not exist;
	// ErrNotServed when the API is not served.
	Class(ctx context.Context, name string) (*Class, error)
}

// API reads the API server at every call: the write-time re-check's reads.
type API struct {
	Client dynamic.Interface
}

var _ Reader = API{}

// FencesOf lists the request's NetworkFences.
func (a API) FencesOf(ctx context.Context, request types.UID) ([]Fence, error) {
	list, err := a.Client.Resource(Resource).List(ctx, metav1.ListOptions{LabelSelector: RequestLabel + "=" + string(request)})
	if err != nil {
		return nil, notServed(err, "listing NetworkFences of FencingRequest "+string(request))
	}
	out := make([]Fence, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, FromUnstructured(&list.Items[i]))
	}
	return out, nil
}

// Class reads a NetworkFenceClass.
func (a API) Class(ctx context.Context, name string) (*Class, error) {
	u, err := a.Client.Resource(ClassResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !isKindMissing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, notServed(err, "reading NetworkFenceClass "+name)
	}
	c := ClassFromUnstructured(u)
	return &c, nil
}

// notServed maps the API server's answer for a resource it does not serve
// to ErrNotServed.
func notServed(err error, what string) error {
	if isKindMissing(err) {
		return ErrNotServed
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isKindMissing: a 404 whose details name no object is the resource
// itself missing (the API server answers so for an unknown resource).
func isKindMissing(err error) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		d := st.Status().Details
		return d == nil || d.Name == ""
	}
	return false
}

// Informers is Reader over informer caches that start the first time they
// are needed and only once the API server serves the kinds: a cluster
// without csi-addons pays nothing, and one that installs it later is
// picked up without a restart (discovery is asked again after recheck).
type Informers struct {
	Client    dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// OnFence is called for every NetworkFence Fenceline made that is
	// added, changed or deleted, with its node's name.
	OnFence func(node string)
	// Recheck is how long a "not served" answer is kept; 30s when zero.
	Recheck time.Duration

	mu      sync.Mutex
	started bool
	checked time.Time
	fences  cache.SharedIndexInformer
	classes cache.SharedIndexInformer
	stop    <-chan struct{}
}

// Start lets the informers of inf run, once they are needed, until ctx
// ends; it returns at once. Before Start, every read answers ErrNotServed.
func (inf *Informers) Start(ctx context.Context) {
	inf.mu.Lock()
	inf.stop = ctx.Done()
	inf.mu.Unlock()
}

const byRequest = "byRequest"

// syncTimeout bounds the first sync of the caches, which a worker waits for.
const syncTimeout = 30 * time.Second

// ensure starts the informers when the API is served; it answers
// ErrNotServed while it is not, asking discovery at most once per Recheck.
func (inf *Informers) ensure(ctx context.Context) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.started {
		return nil
	}
	if inf.stop == nil {
		return ErrNotServed
	}
	recheck := inf.Recheck
	if recheck == 0 {
		recheck = 30 * time.Second
	}
	if !inf.checked.IsZero() && time.Since(inf.checked) < recheck {
		return ErrNotServed
	}
	inf.checked = time.Now()
	if !Served(inf.Discovery) {
		return ErrNotServed
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(inf.Client, 0, "", func(o *metav1.ListOptions) {
		o.LabelSelector = RequestLabel
	})
	inf.fences = f.ForResource(Resource).Informer()
	if err := inf.fences.AddIndexers(cache.Indexers{byRequest: func(obj any) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return []string{u.GetLabels()[RequestLabel]}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("indexing NetworkFences: %w", err)
	}
	if inf.OnFence != nil {
		notify := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GetAnnotations()[NodeAnnotation] != "" {
				inf.OnFence(u.GetAnnotations()[NodeAnnotation])
			}
		}
		if _, err := inf.fences.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: notify, UpdateFunc: func(_, n any) { notify(n) }, DeleteFunc: notify,
		}); err != nil {
			return fmt.Errorf("watching NetworkFences: %w", err)
		}
	}
	all := dynamicinformer.NewDynamicSharedInformerFactory(inf.Client, 0)
	inf.classes = all.ForResource(ClassResource).Informer()
	f.Start(inf.stop)
	all.Start(inf.stop)
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.fences.HasSynced, inf.classes.HasSynced) {
		return fmt.Errorf("waiting for the NetworkFence caches: %w", ctx.Err())
	}
	inf.started = true
	klog.FromContext(ctx).Info("Watching csi-addons NetworkFences")
	return nil
}

// Served asks discovery whether both kinds are served.
func Served(d discovery.DiscoveryInterface) bool {
	if d == nil {
		return false
	}
	res, err := d.ServerResourcesForGroupVersion(Resource.GroupVersion().String())
	if err != nil {
		return false
	}
	var fences, classes bool
	for _, r := range res.APIResources {
		fences = fences || r.Name == Resource.Resource
		classes = classes || r.Name == ClassResource.Resource
	}
	return fences && classes
}

// FencesOf returns the cached NetworkFences of the request.
func (inf *Informers) FencesOf(ctx context.Context, request types.UID) ([]Fence, error) {
	if err := inf.ensure(ctx); err != nil {
		return nil, err
	}
	objs, err := inf.fences.GetIndexer().ByIndex(byRequest, string(request))
	if err != nil {
		return nil, fmt.Errorf("looking up NetworkFences of FencingRequest %s: %w", request, err)
	}
	out := make([]Fence, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, FromUnstructured(u))
		}
	}
	return out, nil
}

// Class returns the cached NetworkFenceClass, nil when none.
func (inf *Informers) Class(ctx context.Context, name string) (*Class, error) {
	if err := inf.ensure(ctx); err != nil {
		return nil, err
	}
	o, ok, err := inf.classes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil, err
	}
	u, isU := o.(*unstructured.Unstructured)
	if !isU {
		return nil, nil
	}
	c := ClassFromUnstructured(u)
	return &c, nil
}
