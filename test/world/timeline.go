package world

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// Entry is one line of a Timeline.
type Entry struct {
	Time time.Time
	What string
}

// Timeline records what happened to nodes, pods and VolumeAttachments, as
// seen through watches, for the demo's story and for test failure output.
type Timeline struct {
	mu      sync.Mutex
	entries []Entry
	// notReady holds the nodes last seen not Ready, to tell a force
	// deletion (no kubelet confirmed it) from an ordinary one.
	notReady map[string]bool
}

// Add records what at t.
func (tl *Timeline) Add(t time.Time, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.entries = append(tl.entries, Entry{Time: t, What: fmt.Sprintf(format, args...)})
}

// Entries returns the entries sorted by time.
func (tl *Timeline) Entries() []Entry {
	tl.mu.Lock()
	out := append([]Entry(nil), tl.entries...)
	tl.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// First returns the time of the first entry containing substr.
func (tl *Timeline) First(substr string) (time.Time, bool) {
	for _, e := range tl.Entries() {
		if strings.Contains(e.What, substr) {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// Format renders the timeline with times relative to t0.
func (tl *Timeline) Format(t0 time.Time) string {
	var b strings.Builder
	for _, e := range tl.Entries() {
		fmt.Fprintf(&b, "  %+8.2fs  %s\n", e.Time.Sub(t0).Seconds(), e.What)
	}
	return b.String()
}

// AddAudit adds the driver calls of interest (controller publish and
// unpublish, forced node clean-up) from an audit log.
func (tl *Timeline) AddAudit(recs []audit.Record) {
	for _, r := range recs {
		switch r.Method {
		case "ControllerPublishVolume", "ControllerUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume":
		default:
			continue
		}
		if (r.Method == "NodeUnpublishVolume" || r.Method == "NodeUnstageVolume") && !r.Force {
			continue
		}
		flags := ""
		if r.Fence {
			flags = " fence=true"
		}
		if r.Force {
			flags = " force=true"
		}
		tl.Add(r.Time, "driver: %s(%s, node %s)%s -> %s", r.Method, r.VolumeID, r.NodeID, flags, r.Code)
	}
}

// Watch starts watches that feed the timeline until stop is closed:
// node readiness and taints, pods of namespace (scheduled, running,
// terminating, deleted) and VolumeAttachments (attached, deleted).
func (tl *Timeline) Watch(cs kubernetes.Interface, namespace string, stop <-chan struct{}) {
	f := informers.NewSharedInformerFactory(cs, 0)
	nf := f.Core().V1().Nodes().Informer()
	_, _ = nf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			old, cur := o.(*corev1.Node), n.(*corev1.Node)
			if a, b := readyStatus(old), readyStatus(cur); a != b {
				tl.setNotReady(cur.Name, b != corev1.ConditionTrue)
				tl.Add(time.Now(), "node %s Ready=%s", cur.Name, b)
			}
			for _, t := range cur.Spec.Taints {
				if !nodeutil.HasTaint(old, t.Key) {
					tl.Add(time.Now(), "node %s tainted %s:%s", cur.Name, t.Key, t.Effect)
				}
			}
			for _, t := range old.Spec.Taints {
				if !nodeutil.HasTaint(cur, t.Key) {
					tl.Add(time.Now(), "node %s untainted %s", cur.Name, t.Key)
				}
			}
		},
	})
	pf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace)).Core().V1().Pods().Informer()
	_, _ = pf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(n any) {
			p := n.(*corev1.Pod)
			tl.Add(time.Now(), "pod %s created", p.Name)
		},
		UpdateFunc: func(o, n any) {
			old, cur := o.(*corev1.Pod), n.(*corev1.Pod)
			if old.Spec.NodeName == "" && cur.Spec.NodeName != "" {
				tl.Add(time.Now(), "pod %s scheduled to %s", cur.Name, cur.Spec.NodeName)
			}
			if old.Status.Phase != cur.Status.Phase {
				tl.Add(time.Now(), "pod %s %s on %s", cur.Name, cur.Status.Phase, cur.Spec.NodeName)
			}
			if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
				tl.Add(time.Now(), "pod %s terminating on %s", cur.Name, cur.Spec.NodeName)
			}
		},
		DeleteFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				how := "deleted"
				if tl.isNotReady(p.Spec.NodeName) {
					how = "force-deleted (no kubelet confirmed)"
				}
				tl.Add(time.Now(), "pod %s %s from %s", p.Name, how, p.Spec.NodeName)
			}
		},
	})
	vf := f.Storage().V1().VolumeAttachments().Informer()
	_, _ = vf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(n any) {
			va := n.(*storagev1.VolumeAttachment)
			tl.Add(time.Now(), "VolumeAttachment for %s created (node %s)", pvName(va), va.Spec.NodeName)
		},
		UpdateFunc: func(o, n any) {
			old, cur := o.(*storagev1.VolumeAttachment), n.(*storagev1.VolumeAttachment)
			if !old.Status.Attached && cur.Status.Attached {
				tl.Add(time.Now(), "volume %s attached to %s", pvName(cur), cur.Spec.NodeName)
			}
		},
		DeleteFunc: func(o any) {
			if va, ok := o.(*storagev1.VolumeAttachment); ok {
				tl.Add(time.Now(), "VolumeAttachment for %s deleted (node %s): detached", pvName(va), va.Spec.NodeName)
			}
		},
	})
	f.Start(stop)
	go pf.Run(stop)
	cache.WaitForCacheSync(stop, nf.HasSynced, pf.HasSynced, vf.HasSynced)
}

func (tl *Timeline) setNotReady(node string, notReady bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.notReady == nil {
		tl.notReady = map[string]bool{}
	}
	tl.notReady[node] = notReady
}

func (tl *Timeline) isNotReady(node string) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.notReady[node]
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	if c := nodeutil.ReadyCondition(n); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

func pvName(va *storagev1.VolumeAttachment) string {
	if va.Spec.Source.PersistentVolumeName != nil {
		return *va.Spec.Source.PersistentVolumeName
	}
	return va.Name
}
