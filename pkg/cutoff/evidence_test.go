package cutoff

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

const evidenceDriver = "disk.example.com"

var evidenceNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// heartbeat returns a Lease for driver renewed ago before evidenceNow, with
// a 15 s duration and the given unpublish-fence annotation.
func heartbeat(driver string, fence string, ago time.Duration) *coordinationv1.Lease {
	l := testobj.Heartbeat("kube-system", driver, evidenceNow.Add(-ago), testobj.LeaseDuration(15*time.Second))
	l.Annotations[names.HeartbeatUnpublishFenceAnnotation] = fence
	return l
}

// seen is the Leases with their renewals observed at their renewTime (the
// attacher's clock agrees with the reader's, the watch is instant).
func seen(leases ...*coordinationv1.Lease) []Heartbeat {
	out := make([]Heartbeat, 0, len(leases))
	for _, l := range leases {
		h := Heartbeat{Lease: l, Renewed: true}
		if l != nil && l.Spec.RenewTime != nil {
			h.ObservedAt = l.Spec.RenewTime.Time
		}
		out = append(out, h)
	}
	return out
}

// skewed is a heartbeat renewed and seen ago before evidenceNow by an
// attacher whose clock is off by skew (renewTime = seen + skew).
func skewed(ago, skew time.Duration) Heartbeat {
	l := heartbeat(evidenceDriver, "true", ago-skew)
	return Heartbeat{Lease: l, ObservedAt: evidenceNow.Add(-ago), Renewed: true}
}

func csiDriver(attachRequired *bool) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: evidenceDriver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: attachRequired},
	}
}

func TestAttacherServes(t *testing.T) {
	fresh := heartbeat(evidenceDriver, "true", 5*time.Second)
	noDuration := heartbeat(evidenceDriver, "true", 0)
	noDuration.Spec.LeaseDurationSeconds = nil
	noRenew := heartbeat(evidenceDriver, "true", 0)
	noRenew.Spec.RenewTime = nil
	collision := heartbeat("disk-example.com", "true", time.Second)
	collision.Name = fresh.Name // sanitizes to the same name and label
	tests := []struct {
		name        string
		leases      []Heartbeat
		driver      *storagev1.CSIDriver
		want        bool
		wantMissing []string
		wantUntil   time.Time
	}{
		{name: "fresh, fence-capable, attachRequired true", leases: seen(fresh), driver: csiDriver(ptr.To(true)),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "attachRequired nil defaults to true", leases: seen(fresh), driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "attachRequired false", leases: seen(fresh), driver: csiDriver(ptr.To(false)),
			wantMissing: []string{"attachRequired: false"}},
		{name: "CSIDriver missing", leases: seen(fresh),
			wantMissing: []string{"CSIDriver disk.example.com not found"}},
		{name: "no Lease at all", driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease for driver disk.example.com"}},
		{name: "nil entries are ignored", leases: seen(nil), driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease"}},
		{name: "Lease of another driver with a colliding name", leases: seen(collision), driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease for driver disk.example.com"}},
		{name: "stale", leases: seen(heartbeat(evidenceDriver, "true", 20*time.Second)), driver: csiDriver(nil),
			wantMissing: []string{"stale since 2026-03-01T11:59:55Z", "renewal last seen 2026-03-01T11:59:40Z"}},
		{name: "expires exactly now", leases: seen(heartbeat(evidenceDriver, "true", 15*time.Second)), driver: csiDriver(nil),
			wantMissing: []string{"stale since 2026-03-01T12:00:00Z"}},
		{name: "attacher clock 30 s ahead, seen 5 s ago: fresh for the duration from the sighting", leases: []Heartbeat{skewed(5*time.Second, 30*time.Second)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "attacher clock 30 s ahead, seen 20 s ago: stale whatever renewTime claims", leases: []Heartbeat{skewed(20*time.Second, 30*time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"stale since 2026-03-01T11:59:55Z", "renewal last seen 2026-03-01T11:59:40Z"}},
		{name: "attacher clock 30 s behind, seen 5 s ago: fresh", leases: []Heartbeat{skewed(5*time.Second, -30*time.Second)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "renewTime an hour ahead, observed now: capped at leaseDurationSeconds", leases: []Heartbeat{skewed(0, time.Hour)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(15 * time.Second)},
		{name: "observation in the future counts as now", leases: []Heartbeat{skewed(-time.Minute, 0)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(15 * time.Second)},
		{name: "found in the first list, no renewal seen yet: not evidence", leases: []Heartbeat{{Lease: fresh, ObservedAt: evidenceNow.Add(-time.Second)}}, driver: csiDriver(nil),
			wantMissing: []string{"no renewal of heartbeat Lease kube-system/", "seen yet"}},
		{name: "no observation at all: not evidence", leases: []Heartbeat{{Lease: fresh, Renewed: true}}, driver: csiDriver(nil),
			wantMissing: []string{"seen yet"}},
		{name: "no renewTime", leases: seen(noRenew), driver: csiDriver(nil),
			wantMissing: []string{"no renewTime or no positive leaseDurationSeconds"}},
		{name: "no leaseDurationSeconds", leases: seen(noDuration), driver: csiDriver(nil),
			wantMissing: []string{"no renewTime or no positive leaseDurationSeconds"}},
		{name: "attacher reports no UNPUBLISH_FENCE", leases: seen(heartbeat(evidenceDriver, "false", time.Second)), driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "fence annotation missing counts as no fence", leases: seen(heartbeat(evidenceDriver, "", time.Second)), driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "a fresh non-fencing attacher vetoes a fencing one", leases: seen(fresh, heartbeat(evidenceDriver, "false", time.Second)), driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "a stale non-fencing attacher does not veto", leases: seen(fresh, heartbeat(evidenceDriver, "false", time.Minute)), driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "one fresh among stale ones serves; latest expiry wins", leases: seen(
			heartbeat(evidenceDriver, "true", time.Minute), fresh, heartbeat(evidenceDriver, "true", time.Second)), driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(14 * time.Second)},
		{name: "every problem is named", leases: seen(heartbeat(evidenceDriver, "true", time.Hour)), driver: csiDriver(ptr.To(false)),
			wantMissing: []string{"attachRequired: false", "stale since"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AttacherServes(evidenceDriver, tc.leases, tc.driver, evidenceNow)
			if got.Serving != tc.want {
				t.Fatalf("Serving = %v (missing %q), want %v", got.Serving, got.Missing, tc.want)
			}
			if tc.want && (got.Missing != "" || !got.Until.Equal(tc.wantUntil)) {
				t.Errorf("got %+v, want no Missing and Until %s", got, tc.wantUntil)
			}
			for _, want := range tc.wantMissing {
				if !strings.Contains(got.Missing, want) {
					t.Errorf("Missing = %q, want it to contain %q", got.Missing, want)
				}
			}
			if !tc.want && got.Missing == "" {
				t.Error("refused without saying what is missing")
			}
		})
	}
}
