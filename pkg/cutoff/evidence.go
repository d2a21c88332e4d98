package cutoff

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/names"
)

// MaxHeartbeatSkew is how far in the future a heartbeat's renewTime may lie
// and still count. The attacher writes renewTime with its own clock and the
// controller reads it with another; a small difference is normal, but a
// renewTime far ahead would keep a dead attacher looking alive for as long
// as its clock is ahead, so it is refused and reported as clock skew.
const MaxHeartbeatSkew = 2 * time.Second

// Evidence is the outcome of AttacherServes.
type Evidence struct {
	// Serving is true when a fence-capable fenceline-attacher currently
	// serves the driver and the driver's volumes go through VolumeAttachments.
	Serving bool
	// Missing says, for humans, what is missing when Serving is false.
	Missing string
	// Until is when the evidence goes stale unless renewed (set only when
	// Serving): the time to look again.
	Until time.Time
}

// AttacherServes is the single place that states whether a safe-detach
// action may rely on the attacher fencing the detach. It needs positive,
// fresh evidence, because the leader-election Lease is shared with the
// upstream external-attacher and so proves nothing:
//
//   - the CSIDriver object exists and attachRequired is not false (nil means
//     true, the API default): without VolumeAttachments nothing is detached
//     through the attacher, so nothing is fenced;
//   - at least one heartbeat Lease whose HeartbeatDriverAnnotation is exactly
//     driver (Leases of other drivers are ignored) was renewed no longer
//     than its leaseDurationSeconds ago, and not more than MaxHeartbeatSkew
//     in the future;
//   - every such fresh Lease reports UNPUBLISH_FENCE: an attacher that
//     cannot fence may take the detach, so one of them vetoes.
//
// Missing lists every problem found, joined by "; ".
func AttacherServes(driver string, leases []*coordinationv1.Lease, csiDriver *storagev1.CSIDriver, now time.Time) Evidence {
	var missing []string
	switch {
	case csiDriver == nil:
		missing = append(missing, fmt.Sprintf("CSIDriver %s not found", driver))
	case csiDriver.Spec.AttachRequired != nil && !*csiDriver.Spec.AttachRequired:
		missing = append(missing, fmt.Sprintf("CSIDriver %s has attachRequired: false, so its volumes are never detached through the attacher and never fenced", driver))
	}
	var (
		until  time.Time
		stale  []string
		vetoes []string
		found  bool
	)
	for _, l := range leases {
		if l == nil || l.Annotations[names.HeartbeatDriverAnnotation] != driver {
			continue
		}
		found = true
		expiry, why := heartbeatFresh(l, now)
		switch {
		case why != "":
			stale = append(stale, why)
		case l.Annotations[names.HeartbeatUnpublishFenceAnnotation] != "true":
			vetoes = append(vetoes, fmt.Sprintf("heartbeat Lease %s reports that driver %s does not advertise UNPUBLISH_FENCE", leaseRef(l), driver))
		case expiry.After(until):
			until = expiry
		}
	}
	switch {
	case !found:
		missing = append(missing, fmt.Sprintf("no fenceline-attacher heartbeat Lease for driver %s (labelled %s, named %s in the attacher's namespace)",
			driver, names.DriverLabel, names.AttacherHeartbeatLeaseName(driver)))
	case len(vetoes) > 0:
		missing = append(missing, vetoes...)
	case until.IsZero():
		missing = append(missing, stale...)
	}
	if len(missing) > 0 {
		return Evidence{Missing: strings.Join(missing, "; ")}
	}
	return Evidence{Serving: true, Until: until}
}

// heartbeatFresh returns when the Lease's evidence expires, or why it is
// not fresh at now.
func heartbeatFresh(l *coordinationv1.Lease, now time.Time) (time.Time, string) {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return time.Time{}, fmt.Sprintf("heartbeat Lease %s has no renewTime or no positive leaseDurationSeconds", leaseRef(l))
	}
	renewed := l.Spec.RenewTime.Time
	expiry := renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	switch {
	case renewed.After(now.Add(MaxHeartbeatSkew)):
		return time.Time{}, fmt.Sprintf("heartbeat Lease %s was renewed at %s, %s in the future: clocks are skewed",
			leaseRef(l), renewed.UTC().Format(time.RFC3339), renewed.Sub(now).Round(time.Second))
	case !expiry.After(now):
		return time.Time{}, fmt.Sprintf("heartbeat Lease %s stale since %s (last renewed %s, leaseDurationSeconds %d)",
			leaseRef(l), expiry.UTC().Format(time.RFC3339), renewed.UTC().Format(time.RFC3339), *l.Spec.LeaseDurationSeconds)
	}
	return expiry, ""
}

func leaseRef(l *coordinationv1.Lease) string {
	return l.Namespace + "/" + l.Name
}
