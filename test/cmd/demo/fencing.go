package main

import (
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	informers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	"fenceline.io/fenceline/test/world"
)

// requestWatcher feeds a timeline with what FencingRequests show as it
// happens: creation, each phase, each fence attempt starting and ending.
// The request's own status times have a resolution of one second; the
// timeline wants the moment each step became visible.
type requestWatcher struct {
	tl       *world.Timeline
	mu       sync.Mutex
	phases   map[string]fencingv1alpha1.FencingPhase // by request name
	attempts map[string]fencingv1alpha1.FenceAttemptResult
	seen     map[string]time.Time // by phase key, when first seen
}

// watchFencingRequests starts a watch of every FencingRequest that feeds
// tl until stop closes, and returns once its cache is in sync.
func watchFencingRequests(cs versioned.Interface, tl *world.Timeline, stop <-chan struct{}) *requestWatcher {
	rw := &requestWatcher{tl: tl, phases: map[string]fencingv1alpha1.FencingPhase{},
		attempts: map[string]fencingv1alpha1.FenceAttemptResult{}, seen: map[string]time.Time{}}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Fencing().V1alpha1().FencingRequests().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rw.observe(obj, true) },
		UpdateFunc: func(_, obj any) { rw.observe(obj, false) },
	})
	f.Start(stop)
	cache.WaitForCacheSync(stop, inf.HasSynced)
	return rw
}

// observe records what changed in one request.
func (rw *requestWatcher) observe(obj any, added bool) {
	r, ok := obj.(*fencingv1alpha1.FencingRequest)
	if !ok {
		return
	}
	now := time.Now()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if added {
		rw.tl.Add(now, "FencingRequest %s created for node %s (reason %s, by %s)", r.Name, r.Spec.NodeName, r.Spec.Reason, r.Spec.Requester)
	}
	if p := r.Status.Phase; p != "" && rw.phases[r.Name] != p {
		rw.phases[r.Name] = p
		rw.seen[phaseKey(r.Name, p)] = now
		rw.tl.Add(now, "FencingRequest %s phase %s%s", r.Name, p, phaseNote(p))
	}
	for _, a := range r.Status.Attempts {
		key := fmt.Sprintf("%s/%d/%s/%s", r.Name, a.Level, a.FenceClass, a.StartTime.UTC().Format(time.RFC3339Nano))
		last, known := rw.attempts[key]
		if !known {
			rw.attempts[key] = ""
			rw.tl.Add(now, "fence agent: level %d, FenceClass %s (%s): power-off attempt started", a.Level, a.FenceClass, a.Method)
		}
		if a.Result != "" && a.Result != last {
			rw.attempts[key] = a.Result
			rw.tl.Add(now, "fence agent: level %d, FenceClass %s: attempt %s, power read back %s", a.Level, a.FenceClass, a.Result, orUnread(a.VerifiedPowerState))
		}
	}
}

// phaseSeen returns when request name was first seen in phase p.
func (rw *requestWatcher) phaseSeen(name string, p fencingv1alpha1.FencingPhase) (time.Time, bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	t, ok := rw.seen[phaseKey(name, p)]
	return t, ok
}

func phaseKey(name string, p fencingv1alpha1.FencingPhase) string { return name + "/" + string(p) }

// phaseNote explains a phase in the timeline.
func phaseNote(p fencingv1alpha1.FencingPhase) string {
	switch p {
	case fencingv1alpha1.FencingPhaseTriaged:
		return ": node, policy and FenceClass exist"
	case fencingv1alpha1.FencingPhaseFencing:
		return ": admitted by the storm guard, handed to the fence agent"
	case fencingv1alpha1.FencingPhaseFenced:
		return ": power read back Off, node out of service"
	case fencingv1alpha1.FencingPhaseRecovering:
		return ": node Ready again with a new boot ID"
	case fencingv1alpha1.FencingPhaseRecovered:
		return ": node unfenced"
	}
	return ""
}

func orUnread(state string) string {
	if state == "" {
		return "nothing"
	}
	return state
}

// describeRequest summarises a request's status as the API records it
// (times to the second, UTC).
func describeRequest(r *fencingv1alpha1.FencingRequest) string {
	s := fmt.Sprintf("FencingRequest %s: phase %s, reason %s", r.Name, r.Status.Phase, r.Spec.Reason)
	for _, t := range []struct {
		what string
		at   *metav1.Time
	}{{"started", r.Status.StartTime}, {"fenced", r.Status.FencedTime}, {"completed", r.Status.CompletionTime}} {
		if t.at != nil {
			s += fmt.Sprintf(", %s %s", t.what, t.at.UTC().Format(time.TimeOnly))
		}
	}
	for _, a := range r.Status.Attempts {
		s += fmt.Sprintf("; attempt level %d %s (%s): %s, read back %s", a.Level, a.FenceClass, a.Method, a.Result, orUnread(a.VerifiedPowerState))
	}
	return s + fmt.Sprintf("; boot ID at fence %s", r.Status.BootIDAtFence)
}
