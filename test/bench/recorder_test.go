package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podSeen is the first moment a pod was seen Running on a node.
type podSeen struct {
	Name, Node string
	At         time.Time
}

// vaSeen is the first moment a VolumeAttachment was seen attached.
type vaSeen struct {
	PV, Node string
	At       time.Time
}

// recorder timestamps, as watch events arrive, the moments the failover
// benchmark measures: pods Running and deleted, VolumeAttachments attached
// and deleted. Times are taken on arrival in this process, which shares
// its clock with every component of the local cluster.
type recorder struct {
	mu           sync.Mutex
	podScheduled map[types.UID]podSeen
	podRunning   map[types.UID]podSeen
	podDeleted   map[types.UID]time.Time
	vaCreated    map[types.UID]vaSeen
	vaAttached   map[types.UID]vaSeen
	vaDeleted    map[types.UID]time.Time

	pods cache.Indexer
	vas  cache.Indexer
}

// startRecorder starts informers on the pods of namespace and on every
// VolumeAttachment; they stop with ctx.
func startRecorder(ctx context.Context, cs kubernetes.Interface, namespace string) (*recorder, error) {
	r := &recorder{
		podScheduled: map[types.UID]podSeen{},
		podRunning:   map[types.UID]podSeen{},
		vaCreated:    map[types.UID]vaSeen{},
		podDeleted:   map[types.UID]time.Time{},
		vaAttached:   map[types.UID]vaSeen{},
		vaDeleted:    map[types.UID]time.Time{},
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
	vaFactory := informers.NewSharedInformerFactory(cs, 0)
	podInf := podFactory.Core().V1().Pods().Informer()
	vaInf := vaFactory.Storage().V1().VolumeAttachments().Informer()
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.pod(obj) },
		UpdateFunc: func(_, obj any) { r.pod(obj) },
		DeleteFunc: func(obj any) { r.podGone(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	if _, err := vaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.va(obj) },
		UpdateFunc: func(_, obj any) { r.va(obj) },
		DeleteFunc: func(obj any) { r.vaGone(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching VolumeAttachments: %w", err)
	}
	r.pods, r.vas = podInf.GetIndexer(), vaInf.GetIndexer()
	podFactory.Start(ctx.Done())
	vaFactory.Start(ctx.Done())
	for typ, ok := range podFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	for typ, ok := range vaFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	return r, nil
}

func (r *recorder) pod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := podSeen{Name: p.Name, Node: p.Spec.NodeName, At: now}
	if _, ok := r.podScheduled[p.UID]; !ok {
		r.podScheduled[p.UID] = seen
	}
	if _, ok := r.podRunning[p.UID]; !ok && p.Status.Phase == corev1.PodRunning {
		r.podRunning[p.UID] = seen
	}
}

func (r *recorder) podGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.podDeleted[p.UID] = now
}

func (r *recorder) va(obj any) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := vaSeen{PV: *va.Spec.Source.PersistentVolumeName, Node: va.Spec.NodeName, At: now}
	if _, ok := r.vaCreated[va.UID]; !ok {
		r.vaCreated[va.UID] = seen
	}
	if _, ok := r.vaAttached[va.UID]; !ok && va.Status.Attached {
		r.vaAttached[va.UID] = seen
	}
}

func (r *recorder) vaGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vaDeleted[va.UID] = now
}

// runningPods returns the pods of the namespace that are Running, not
// being deleted, and on a node, from the informer cache.
func (r *recorder) runningPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range r.pods.List() {
		p := obj.(*corev1.Pod)
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			out = append(out, p)
		}
	}
	return out
}

// attachmentsOn returns the VolumeAttachments for node, from the cache.
func (r *recorder) attachmentsOn(node string) []*storagev1.VolumeAttachment {
	var out []*storagev1.VolumeAttachment
	for _, obj := range r.vas.List() {
		va := obj.(*storagev1.VolumeAttachment)
		if va.Spec.NodeName == node {
			out = append(out, va)
		}
	}
	return out
}

// lastDeleted returns the latest deletion time of uids, and false while
// one of them is not deleted yet.
func lastDeleted(seen map[types.UID]time.Time, uids []types.UID) (time.Time, bool) {
	var last time.Time
	for _, u := range uids {
		t, ok := seen[u]
		if !ok {
			return time.Time{}, false
		}
		if t.After(last) {
			last = t
		}
	}
	return last, true
}

// victimState is what was on the lost node when it was lost.
type victimState struct {
	Node string
	// Pods maps the old pods' names to their UIDs.
	Pods map[string]types.UID
	// PVs maps the old pods' names to the PersistentVolume of their claim.
	PVs map[string]string
	// VAs are the old VolumeAttachments' UIDs.
	VAs []types.UID
}

// progress is how far a failover got, as absolute times of the last pod
// or volume to reach each stage; zero while one is pending.
type progress struct {
	PodsDeleted time.Time
	VAsGone     time.Time
	// The replacements' stages: scheduled to a node, new VolumeAttachment
	// created (by the attach/detach controller), attached, pod Running.
	Scheduled, VAsCreated, VAsAttached, Running time.Time
	// Replacements is when the last replacement was both Running and
	// attached.
	Replacements time.Time
}

func (p progress) done() bool {
	return !p.PodsDeleted.IsZero() && !p.VAsGone.IsZero() && !p.Replacements.IsZero()
}

// progress evaluates the failover of v from what was recorded.
func (r *recorder) progress(v victimState) progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p progress
	old := make([]types.UID, 0, len(v.Pods))
	for _, u := range v.Pods {
		old = append(old, u)
	}
	if t, ok := lastDeleted(r.podDeleted, old); ok {
		p.PodsDeleted = t
	}
	if t, ok := lastDeleted(r.vaDeleted, v.VAs); ok {
		p.VAsGone = t
	}
	var last stages
	for name, oldUID := range v.Pods {
		st := r.replacement(name, oldUID, v.Node, v.PVs[name])
		if st.ready().IsZero() {
			return p
		}
		last = last.latest(st)
	}
	p.Scheduled, p.VAsCreated, p.VAsAttached, p.Running = last.scheduled, last.vaCreated, last.vaAttached, last.running
	p.Replacements = last.readyAt
	return p
}

// stages are the moments one replacement pod went through.
type stages struct {
	scheduled, vaCreated, vaAttached, running, readyAt time.Time
}

// ready returns when the pod was both Running and attached, zero until then.
func (s stages) ready() time.Time {
	if s.running.IsZero() || s.vaAttached.IsZero() {
		return time.Time{}
	}
	return later(s.running, s.vaAttached)
}

// latest returns, stage by stage, the later of s and o.
func (s stages) latest(o stages) stages {
	return stages{
		scheduled:  later(s.scheduled, o.scheduled),
		vaCreated:  later(s.vaCreated, o.vaCreated),
		vaAttached: later(s.vaAttached, o.vaAttached),
		running:    later(s.running, o.running),
		readyAt:    later(s.readyAt, o.ready()),
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// replacement returns the stages of the replacement of pod name: a pod of
// that name but another UID, not deleted, on a node other than lost, and the
// VolumeAttachment of its PersistentVolume to that node. Callers hold r.mu.
func (r *recorder) replacement(name string, oldUID types.UID, lost, pv string) stages {
	var st stages
	for uid, ps := range r.podScheduled {
		// A replacement that was itself deleted (and replaced again) is
		// not the one that ends the failover.
		if _, deleted := r.podDeleted[uid]; deleted || uid == oldUID || ps.Name != name || ps.Node == lost {
			continue
		}
		st.scheduled = ps.At
		if run, ok := r.podRunning[uid]; ok {
			st.running = run.At
		}
		for vaUID, vs := range r.vaCreated {
			if vs.PV != pv || vs.Node != ps.Node {
				continue
			}
			st.vaCreated = vs.At
			if att, ok := r.vaAttached[vaUID]; ok {
				st.vaAttached = att.At
			}
		}
		return st
	}
	return st
}
