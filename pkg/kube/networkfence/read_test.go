package networkfence

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// switchableDiscovery serves the NetworkFence kinds once serve is set, and
// counts discovery's calls.
type switchableDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu    sync.Mutex
	serve bool
	calls int
}

func (d *switchableDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if !d.serve {
		return nil, errors.New("the server could not find the requested resource")
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
		{Name: Resource.Resource, Kind: "NetworkFence"}, {Name: ClassResource.Resource, Kind: "NetworkFenceClass"},
	}}, nil
}

func (d *switchableDiscovery) set(serve bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.serve = serve
}

func (d *switchableDiscovery) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// TestInformersAskDiscoveryInTheBackground: reads never ask discovery (on a
// slow API server that would be a round trip in a failover's chain); an API
// served later is picked up by the background recheck.
func TestInformersAskDiscoveryInTheBackground(t *testing.T) {
	spec := Spec{Name: "r-nf-1", Class: "nf", CIDRs: []string{"10.0.0.7/32"}, Request: "uid-1", Node: "node-a", NodeLabel: "node-a"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		Resource: "NetworkFenceList", ClassResource: "NetworkFenceClassList",
	}, spec.Object())
	disc := &switchableDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}}
	inf := &Informers{Client: dyn, Discovery: disc, Recheck: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if _, err := inf.FencesOf(ctx, "uid-1"); !errors.Is(err, ErrNotServed) {
		t.Fatalf("before Start: err %v, want ErrNotServed", err)
	}
	if disc.count() != 0 {
		t.Fatalf("a read before Start asked discovery %d times", disc.count())
	}
	inf.Start(ctx)
	if _, err := inf.FencesOf(ctx, "uid-1"); !errors.Is(err, ErrNotServed) {
		t.Fatalf("not served: err %v, want ErrNotServed", err)
	}
	// Discovery runs on its own schedule: many reads between two of its
	// passes ask it nothing.
	before := disc.count()
	for range 50 {
		if _, err := inf.Class(ctx, "nf"); !errors.Is(err, ErrNotServed) {
			t.Fatalf("not served: err %v, want ErrNotServed", err)
		}
	}
	if after := disc.count(); after > before+2 {
		t.Errorf("50 reads made discovery go from %d to %d calls: reads must not ask it", before, after)
	}

	disc.set(true)
	var fences []Fence
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		fences, err = inf.FencesOf(ctx, "uid-1")
		if errors.Is(err, ErrNotServed) {
			return false, nil
		}
		return true, err
	}); err != nil {
		t.Fatalf("the API served later was never picked up: %v", err)
	}
	if len(fences) != 1 || fences[0].Name != spec.Name {
		t.Fatalf("served: fences %+v, want %s", fences, spec.Name)
	}
	served := disc.count()
	if _, err := inf.FencesOf(ctx, "uid-2"); err != nil {
		t.Fatalf("served: %v", err)
	}
	if disc.count() != served {
		t.Errorf("a read once the informers run asked discovery")
	}
}
