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
		leases      []*coordinationv1.Lease
		driver      *storagev1.CSIDriver
		want        bool
		wantMissing []string
		wantUntil   time.Time
	}{
		{name: "fresh, fence-capable, attachRequired true", leases: []*coordinationv1.Lease{fresh}, driver: csiDriver(ptr.To(true)),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "attachRequired nil defaults to true", leases: []*coordinationv1.Lease{fresh}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "attachRequired false", leases: []*coordinationv1.Lease{fresh}, driver: csiDriver(ptr.To(false)),
			wantMissing: []string{"attachRequired: false"}},
		{name: "CSIDriver missing", leases: []*coordinationv1.Lease{fresh},
			wantMissing: []string{"CSIDriver disk.example.com not found"}},
		{name: "no Lease at all", driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease for driver disk.example.com"}},
		{name: "nil entries are ignored", leases: []*coordinationv1.Lease{nil}, driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease"}},
		{name: "Lease of another driver with a colliding name", leases: []*coordinationv1.Lease{collision}, driver: csiDriver(nil),
			wantMissing: []string{"no fenceline-attacher heartbeat Lease for driver disk.example.com"}},
		{name: "stale", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "true", 20*time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"stale since 2026-03-01T11:59:55Z", "last renewed 2026-03-01T11:59:40Z"}},
		{name: "expires exactly now", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "true", 15*time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"stale since 2026-03-01T12:00:00Z"}},
		{name: "renewTime slightly ahead (within skew) counts", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "true", -time.Second)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(16 * time.Second)},
		{name: "renewTime far in the future: clock skew", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "true", -time.Minute)}, driver: csiDriver(nil),
			wantMissing: []string{"1m0s in the future: clocks are skewed"}},
		{name: "no renewTime", leases: []*coordinationv1.Lease{noRenew}, driver: csiDriver(nil),
			wantMissing: []string{"no renewTime or no positive leaseDurationSeconds"}},
		{name: "no leaseDurationSeconds", leases: []*coordinationv1.Lease{noDuration}, driver: csiDriver(nil),
			wantMissing: []string{"no renewTime or no positive leaseDurationSeconds"}},
		{name: "attacher reports no UNPUBLISH_FENCE", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "false", time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "fence annotation missing counts as no fence", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "", time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "a fresh non-fencing attacher vetoes a fencing one", leases: []*coordinationv1.Lease{fresh, heartbeat(evidenceDriver, "false", time.Second)}, driver: csiDriver(nil),
			wantMissing: []string{"does not advertise UNPUBLISH_FENCE"}},
		{name: "a stale non-fencing attacher does not veto", leases: []*coordinationv1.Lease{fresh, heartbeat(evidenceDriver, "false", time.Minute)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(10 * time.Second)},
		{name: "one fresh among stale ones serves; latest expiry wins", leases: []*coordinationv1.Lease{
			heartbeat(evidenceDriver, "true", time.Minute), fresh, heartbeat(evidenceDriver, "true", time.Second)}, driver: csiDriver(nil),
			want: true, wantUntil: evidenceNow.Add(14 * time.Second)},
		{name: "every problem is named", leases: []*coordinationv1.Lease{heartbeat(evidenceDriver, "true", time.Hour)}, driver: csiDriver(ptr.To(false)),
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
