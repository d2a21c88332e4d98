package ctrltest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// settleTimeout bounds how long Settle waits for the informers.
const settleTimeout = 10 * time.Second

// cached is one started informer and how to list what the fake API
// server stores of its type.
type cached struct {
	what     string
	informer cache.SharedIndexInformer
	stored   func() ([]runtime.Object, error)
}

// startedCaches describes the informers a factory started (synced holds
// their types, as WaitForCacheSync returns them). informerFor returns a
// factory's existing informer of an object's type.
func startedCaches[F any](t testing.TB, synced map[reflect.Type]bool, informerFor func(runtime.Object, F) cache.SharedIndexInformer,
	tracker clienttesting.ObjectTracker, scheme *runtime.Scheme, namespace string) []cached {
	t.Helper()
	var out []cached
	for typ, ok := range synced {
		if !ok {
			t.Fatalf("the %s cache never synced", typ)
		}
		obj, isObj := reflect.New(typ.Elem()).Interface().(runtime.Object)
		if !isObj {
			t.Fatalf("informer of %s, which is no API object", typ)
		}
		gvks, _, err := scheme.ObjectKinds(obj)
		if err != nil {
			t.Fatalf("informer of %s: %v", typ, err)
		}
		gvk := gvks[0]
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		var zero F // the informer exists: no constructor is needed
		out = append(out, cached{
			what:     gvr.Resource,
			informer: informerFor(obj, zero),
			stored: func() ([]runtime.Object, error) {
				l, err := tracker.List(gvr, gvk, namespace)
				if err != nil {
					return nil, err
				}
				return meta.ExtractList(l)
			},
		})
	}
	return out
}

// Settle waits until every started informer's store holds exactly the
// objects the fake API servers store (by the tracker, past any reactor a
// test added), so that the next sync decides on them.
func (f *Fixture) Settle() {
	f.T.Helper()
	var diff string
	err := wait.PollUntilContextTimeout(f.Ctx, time.Millisecond, settleTimeout, true, func(context.Context) (bool, error) {
		diff = ""
		for _, c := range f.caches {
			d, err := c.lag()
			if err != nil {
				return false, err
			}
			if d != "" {
				diff = d
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.T.Fatalf("caches never caught up with the API servers (%s): %v", diff, err)
	}
}

// lag says how the cache differs from the API server, "" when it does not.
func (c cached) lag() (string, error) {
	stored, err := c.stored()
	if err != nil {
		return "", fmt.Errorf("listing %s: %w", c.what, err)
	}
	store := c.informer.GetStore()
	if n := len(store.ListKeys()); n != len(stored) {
		return fmt.Sprintf("%s: %d cached, %d stored", c.what, n, len(stored)), nil
	}
	for _, o := range stored {
		got, ok, _ := store.Get(o)
		if !ok || !equality.Semantic.DeepEqual(got, o) {
			return fmt.Sprintf("%s: the cache lags", c.what), nil
		}
	}
	return "", nil
}
