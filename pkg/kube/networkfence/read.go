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
	"k8s.io/apimachinery/pkg/util/wait"
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

// Informers is Reader over informer caches that start only once the API
// server serves the kinds: a cluster without csi-addons pays nothing, and
// one that installs it later is picked up without a restart. Discovery is
// asked in the background (at Start, then every Recheck until the kinds
// are served), never on a reader's path: on a slow API server a read that
// asked discovery first would add a round trip to a failover.
type Informers struct {
	Client    dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// OnFence is called for every NetworkFence Fenceline made that is
	// added, changed or deleted, with its node's name.
	OnFence func(node string)
	// Recheck is how often discovery is asked again while the kinds are
	// not served; 30s when zero.
	Recheck time.Duration

	mu sync.Mutex
	// answered is closed once discovery answered for the first time (nil
	// before Start).
	answered chan struct{}
	// served: the kinds are served and the informers run.
	served  bool
	fences  cache.SharedIndexInformer
	classes cache.SharedIndexInformer
}

// Start asks discovery in the background until ctx ends, and starts the
// informers once the kinds are served; it returns at once. Before Start,
// every read answers ErrNotServed; after it, a read waits only for
// discovery's first answer.
func (inf *Informers) Start(ctx context.Context) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.answered != nil {
		return
	}
	inf.answered = make(chan struct{})
	go inf.discover(ctx, inf.answered)
}

const byRequest = "byRequest"

// syncTimeout bounds the first sync of the caches, which a reader waits for.
const syncTimeout = 30 * time.Second

// discover asks discovery now and every Recheck until the kinds are
// served, then starts the informers. answered is closed after the first
// answer, served or not.
func (inf *Informers) discover(ctx context.Context, answered chan struct{}) {
	first := sync.OnceFunc(func() { close(answered) })
	defer first() // ctx ended before the first answer: readers stop waiting
	recheck := inf.Recheck
	if recheck == 0 {
		recheck = 30 * time.Second
	}
	_ = wait.PollUntilContextCancel(ctx, recheck, true, func(ctx context.Context) (bool, error) {
		defer first()
		if !Served(inf.Discovery) {
			return false, nil
		}
		if err := inf.startInformers(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot watch csi-addons NetworkFences; trying again", "after", recheck)
			return false, nil
		}
		klog.FromContext(ctx).Info("Watching csi-addons NetworkFences")
		return true, nil
	})
}

// startInformers starts the informers of both kinds until ctx ends; the
// readers wait for their first sync.
func (inf *Informers) startInformers(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(inf.Client, 0, "", func(o *metav1.ListOptions) {
		o.LabelSelector = RequestLabel
	})
	fences := f.ForResource(Resource).Informer()
	if err := fences.AddIndexers(cache.Indexers{byRequest: func(obj any) ([]string, error) {
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
		if _, err := fences.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: notify, UpdateFunc: func(_, n any) { notify(n) }, DeleteFunc: notify,
		}); err != nil {
			return fmt.Errorf("watching NetworkFences: %w", err)
		}
	}
	all := dynamicinformer.NewDynamicSharedInformerFactory(inf.Client, 0)
	classes := all.ForResource(ClassResource).Informer()
	f.Start(ctx.Done())
	all.Start(ctx.Done())
	inf.mu.Lock()
	inf.served, inf.fences, inf.classes = true, fences, classes
	inf.mu.Unlock()
	return nil
}

// ready waits for discovery's first answer and, when the kinds are served,
// for the caches' first sync. It answers ErrNotServed when they are not
// served (or before Start); a cache that cannot sync is an error, never
// taken for "none".
func (inf *Informers) ready(ctx context.Context) error {
	inf.mu.Lock()
	answered := inf.answered
	inf.mu.Unlock()
	if answered == nil {
		return ErrNotServed
	}
	select {
	case <-answered:
	case <-ctx.Done():
		return fmt.Errorf("waiting for discovery of the NetworkFence API: %w", ctx.Err())
	}
	inf.mu.Lock()
	served, fences, classes := inf.served, inf.fences, inf.classes
	inf.mu.Unlock()
	if !served {
		return ErrNotServed
	}
	if fences.HasSynced() && classes.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), fences.HasSynced, classes.HasSynced) {
		return fmt.Errorf("waiting for the NetworkFence caches: %w", ctx.Err())
	}
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
	if err := inf.ready(ctx); err != nil {
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
	if err := inf.ready(ctx); err != nil {
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
