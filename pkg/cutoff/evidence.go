package cutoff

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/names"
)

// Heartbeat is a heartbeat Lease with when the reader observed its current
// renewal, on the reader's own clock (renewals.Observation). renewTime is
// written with the attacher's clock and is never compared with the
// reader's: an attacher whose clock runs ahead would otherwise look alive
// long after it stopped.
type Heartbeat struct {
	Lease *coordinationv1.Lease
	// ObservedAt is when the reader first saw the Lease's current renewal.
	ObservedAt time.Time
	// Renewed is true when ObservedAt is when the reader saw the renewal
	// happen. A renewal merely found in the reader's first list (after a
	// restart) may be arbitrarily old and is no evidence until the next.
	Renewed bool
}

// Snapshot turns Leases read once by a reader without observation history
// (the kubectl plugin) into Heartbeats judged by their renewTime, that is
// by the attacher's clock, capped at now so that a renewTime in the future
// claims at most leaseDurationSeconds from now. The controllers never use
// it.
func Snapshot(leases []*coordinationv1.Lease, now time.Time) []Heartbeat {
	out := make([]Heartbeat, 0, len(leases))
	for _, l := range leases {
		h := Heartbeat{Lease: l, Renewed: true}
		if l != nil && l.Spec.RenewTime != nil {
			h.ObservedAt = l.Spec.RenewTime.Time
			if h.ObservedAt.After(now) {
				h.ObservedAt = now
			}
		}
		out = append(out, h)
	}
	return out
}

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
//     driver (Leases of other drivers are ignored) was seen renewed by the
//     reader no longer than its leaseDurationSeconds ago, on the reader's
//     clock: the claimed freshness is capped by leaseDurationSeconds from
//     the observation, whatever renewTime says; a renewal only found in the
//     reader's first list, not seen happen, does not count (the safe
//     choice after a restart: the evidence returns with the next renewal);
//   - every such fresh Lease reports UNPUBLISH_FENCE: an attacher that
//     cannot fence may take the detach, so one of them vetoes.
//
// Missing lists every problem found, joined by "; ".
func AttacherServes(driver string, heartbeats []Heartbeat, csiDriver *storagev1.CSIDriver, now time.Time) Evidence {
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
	for _, h := range heartbeats {
		l := h.Lease
		if l == nil || l.Annotations[names.HeartbeatDriverAnnotation] != driver {
			continue
		}
		found = true
		expiry, why := heartbeatFresh(h, now)
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

// heartbeatFresh returns when the heartbeat's evidence expires, or why it
// is not fresh at now.
func heartbeatFresh(h Heartbeat, now time.Time) (time.Time, string) {
	l := h.Lease
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return time.Time{}, fmt.Sprintf("heartbeat Lease %s has no renewTime or no positive leaseDurationSeconds", leaseRef(l))
	}
	if !h.Renewed || h.ObservedAt.IsZero() {
		return time.Time{}, fmt.Sprintf("no renewal of heartbeat Lease %s seen yet (renewTime %s by the attacher's clock): its next renewal is awaited",
			leaseRef(l), l.Spec.RenewTime.UTC().Format(time.RFC3339))
	}
	observed := h.ObservedAt
	if observed.After(now) {
		observed = now
	}
	expiry := observed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if !expiry.After(now) {
		return time.Time{}, fmt.Sprintf("heartbeat Lease %s stale since %s (renewal last seen %s, leaseDurationSeconds %d)",
			leaseRef(l), expiry.UTC().Format(time.RFC3339), observed.UTC().Format(time.RFC3339), *l.Spec.LeaseDurationSeconds)
	}
	return expiry, ""
}

func leaseRef(l *coordinationv1.Lease) string {
	return l.Namespace + "/" + l.Name
}
