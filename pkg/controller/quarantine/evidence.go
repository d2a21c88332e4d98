package quarantine

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// EventNotReleased is the Event reason on a quarantined node whose unused
// volumes stay in volumesInUse because no fence-capable fenceline-attacher
// is seen serving their driver.
const EventNotReleased = "FencelineVolumesNotReleased"

// AttacherEvidence tells whether a fence-capable fenceline-attacher
// currently serves a driver (attacherevidence.Tracker). Quarantine's
// deletions and releases are safe only because that attacher fences the
// detach, and the leader-election Lease, shared with upstream's attacher,
// cannot prove it runs.
type AttacherEvidence interface {
	// Serving answers from the caches.
	Serving(driver string, now time.Time) (ok bool, missing string)
	// ServingFresh answers from the API server, right before a write.
	ServingFresh(ctx context.Context, driver string) (ok bool, missing string, err error)
	// AddHandler registers f, called when a driver's verdict changes.
	AddHandler(f func(driver string))
}

// cachedAttachers looks the drivers up in the caches.
func (c *Controller) cachedAttachers(drivers []string, now time.Time) Attachers {
	a := make(Attachers, len(drivers))
	for _, d := range drivers {
		ok, missing := c.evidence.Serving(d, now)
		a[d] = cutoff.Evidence{Serving: ok, Missing: missing}
	}
	return a
}

// freshAttachers looks the drivers up on the API server.
func (c *Controller) freshAttachers(ctx context.Context, drivers []string) (Attachers, error) {
	a := make(Attachers, len(drivers))
	for _, d := range drivers {
		ok, missing, err := c.evidence.ServingFresh(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("looking up the attacher evidence of driver %s: %w", d, err)
		}
		a[d] = cutoff.Evidence{Serving: ok, Missing: missing}
	}
	return a, nil
}

// safeDrivers lists the distinct drivers of the pod's safe-detach CSI
// volumes: those whose evidence DecidePod needs.
func safeDrivers(vols []podvolumes.Volume) []string {
	var out []string
	for _, v := range vols {
		if v.Kind == podvolumes.KindCSI && v.SafeDetach && !slices.Contains(out, v.Driver) {
			out = append(out, v.Driver)
		}
	}
	return out
}

// unusedSafeDrivers lists the drivers whose evidence VolumesToRelease needs.
func unusedSafeDrivers(node *v1.Node, isSafeDriver func(string) bool, inUse map[v1.UniqueVolumeName]bool) []string {
	return volumeDrivers(UnusedSafeVolumes(node, isSafeDriver, inUse))
}

// volumeDrivers lists the distinct CSI drivers of volumesInUse entries.
func volumeDrivers(vols []v1.UniqueVolumeName) []string {
	var out []string
	for _, v := range vols {
		if d, ok := nodeutil.CSIVolumeDriver(v); ok && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// reportWithheld records a Warning Event on the node once per distinct
// reason why volumes are kept for want of evidence; "" (nothing withheld)
// resets it, so that the next episode is reported again.
func (c *Controller) reportWithheld(node *v1.Node, withheld string) {
	c.mu.Lock()
	seen := c.withheld[node.Name] == withheld
	if withheld == "" {
		delete(c.withheld, node.Name)
	} else {
		c.withheld[node.Name] = withheld
	}
	c.mu.Unlock()
	if !seen && withheld != "" {
		c.act.Recorder.Event(node, v1.EventTypeWarning, EventNotReleased,
			"Unused volumes kept in volumesInUse, so they are not detached: "+withheld)
	}
}

func (c *Controller) forgetWithheld(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.withheld, node)
}

// enqueueNotReadyNodes re-queues every NotReady node when a driver's
// evidence changes, so that pods refused for want of it are recovered as
// soon as it appears (and nothing more is released once it goes). Changes
// are rare (an attacher starts, stops or goes stale), so one pass over the
// node cache is cheap; Ready nodes need no evidence.
func (c *Controller) enqueueNotReadyNodes(string) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return // a lister never fails
	}
	for _, n := range nodes {
		if !nodeutil.IsReady(n) {
			c.queue.Enqueue(n.Name)
		}
	}
}
