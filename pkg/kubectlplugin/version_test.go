package kubectlplugin

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestAttacherVersions(t *testing.T) {
	hb := testobj.Heartbeat("storage", driver, now)
	hb.Annotations[names.HeartbeatVersionAnnotation] = "v0.1.0"
	s := &Snapshot{
		Drivers:    []*storagev1.CSIDriver{testobj.CSIDriver(driver, nil), testobj.CSIDriver("nfs.example.com", nil)},
		Heartbeats: []*coordinationv1.Lease{hb},
	}
	for _, tc := range []struct {
		plugin, want string
		warn         bool
	}{
		{"v0.1.0", "fenceline-attacher of " + driver + ": v0.1.0", false},
		{"v0.2.0", "fenceline-attacher of " + driver + ": v0.1.0", true},
		{"dev", "fenceline-attacher of " + driver + ": v0.1.0", false},
	} {
		got := attacherVersions(s, tc.plugin)
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) || strings.Contains(got[0], "warning") != tc.warn {
			t.Errorf("plugin %s: %q, want one line starting %q, warning %v (nfs has no heartbeat)", tc.plugin, got, tc.want, tc.warn)
		}
	}
	if got := attacherVersions(&Snapshot{}, "v0.1.0"); len(got) != 1 || !strings.Contains(got[0], "no fenceline-attacher heartbeat") {
		t.Errorf("no heartbeat: %q", got)
	}
}
