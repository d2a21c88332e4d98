package world

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/pkg/names"
)

// SkewNodeLease makes node's kubelet renew its Lease with a clock off by
// skew (negative: behind): see SkewLease.
func (w *World) SkewNodeLease(ctx context.Context, node string, skew time.Duration) (*LeaseSkew, error) {
	if w.Kubelets[node] == nil {
		return nil, fmt.Errorf("skewing the Lease of %q: not a node of this world", node)
	}
	return w.SkewLease(ctx, corev1.NamespaceNodeLease, node, skew)
}

// SkewAttacherHeartbeat makes the (first) driver's fenceline-attacher
// renew its heartbeat Lease with a clock off by skew: see SkewLease.
func (w *World) SkewAttacherHeartbeat(ctx context.Context, skew time.Duration) (*LeaseSkew, error) {
	return w.SkewAttacherHeartbeatOf(ctx, DriverName, skew)
}

// SkewAttacherHeartbeatOf is SkewAttacherHeartbeat for the attacher of the
// driver named driver.
func (w *World) SkewAttacherHeartbeatOf(ctx context.Context, driver string, skew time.Duration) (*LeaseSkew, error) {
	if _, err := w.driver(driver); err != nil {
		return nil, err
	}
	return w.SkewLease(ctx, Namespace, names.AttacherHeartbeatLeaseName(driver), skew)
}

// SkewLease plays the clock of Lease namespace/name's writer (KWOK for a
// node's Lease, fenceline-attacher for its heartbeat) running off by skew:
// each renewal the writer makes is followed at once by a rewrite of its
// renewTime to renewTime+skew. Only a renewal seen happen is rewritten,
// with the renewal's resourceVersion (a newer renewal wins), so a writer
// that stops (a cut node, a killed attacher) leaves its Lease to go stale
// exactly as it would: the skew never renews anything by itself. The
// readers see every renewal twice, once with each clock. Stop ends it.
func (w *World) SkewLease(ctx context.Context, namespace, name string, skew time.Duration) (*LeaseSkew, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(w.Cluster.Client(), 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	s := &LeaseSkew{ctx: ctx, w: w, skew: skew}
	_, err := f.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		// A Lease found in the first list was not seen renewed: only one
		// created later (a restarted attacher's) is a renewal.
		AddFunc: func(obj any, initial bool) {
			if !initial {
				s.renewed(nil, obj)
			}
		},
		UpdateFunc: s.renewed,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching Lease %s/%s: %w", namespace, name, err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	s.stop = func() { cancel(); f.Shutdown(); s.wg.Wait() }
	return s, nil
}

// LeaseSkew rewrites the renewals of one Lease with a skewed clock.
type LeaseSkew struct {
	ctx  context.Context
	w    *World
	skew time.Duration
	wg   sync.WaitGroup
	stop func()

	mu sync.Mutex
	// written is the renewTime of the skewer's own last rewrite, so that
	// its own update is not taken for a renewal; rewrites counts the
	// rewrites that landed.
	written  time.Time
	rewrites int
}

// Stop ends the rewrites and waits for one in flight.
func (s *LeaseSkew) Stop() { s.stop() }

// Rewrites returns how many renewals were rewritten with the skewed
// clock: a skew that rewrote none did not happen.
func (s *LeaseSkew) Rewrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rewrites
}

// renewed rewrites the renewal in cur unless it is the skewer's own
// rewrite or no renewal at all (a re-list delivering what was seen).
func (s *LeaseSkew) renewed(old, cur any) {
	l, ok := cur.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return
	}
	if prev, ok := old.(*coordinationv1.Lease); ok && prev.ResourceVersion == l.ResourceVersion {
		return
	}
	s.mu.Lock()
	own := l.Spec.RenewTime.Time.Equal(s.written)
	s.mu.Unlock()
	if own {
		return
	}
	next := l.DeepCopy()
	at := metav1.NewMicroTime(l.Spec.RenewTime.Add(s.skew))
	next.Spec.RenewTime = &at
	s.wg.Add(1)
	defer s.wg.Done()
	s.mu.Lock()
	s.written = at.Time
	s.mu.Unlock()
	// A conflict means the writer renewed again: that renewal's event
	// comes next and is rewritten in its turn.
	if _, err := s.w.Cluster.Client().CoordinationV1().Leases(l.Namespace).Update(s.ctx, next, metav1.UpdateOptions{}); err == nil {
		s.mu.Lock()
		s.rewrites++
		s.mu.Unlock()
	}
}
