package names

import "testing"

func TestAttacherFinalizer(t *testing.T) {
	tests := []struct {
		name   string
		driver string
		want   string
	}{
		{name: "dots become dashes", driver: "mock.csi.test", want: "external-attacher/mock-csi-test"},
		{name: "already clean", driver: "ebs-csi", want: "external-attacher/ebs-csi"},
		{name: "trailing separator gets X", driver: "driver.", want: "external-attacher/driver-X"},
		{name: "slashes and underscores", driver: "a_b/c", want: "external-attacher/a-b-c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AttacherFinalizer(tc.driver); got != tc.want {
				t.Errorf("AttacherFinalizer(%q) = %q, want %q", tc.driver, got, tc.want)
			}
		})
	}
}

func TestAttacherLeaseName(t *testing.T) {
	if got, want := AttacherLeaseName("mock.csi.test"), "external-attacher-leader-mock-csi-test"; got != want {
		t.Errorf("AttacherLeaseName = %q, want %q", got, want)
	}
}

func TestAttacherHeartbeatLeaseName(t *testing.T) {
	for driver, want := range map[string]string{
		"mock.fenceline.io": "fenceline-attacher-mock-fenceline-io",
		"Disk.CSI.Example":  "fenceline-attacher-disk-csi-example",
	} {
		if got := AttacherHeartbeatLeaseName(driver); got != want {
			t.Errorf("AttacherHeartbeatLeaseName(%q) = %q, want %q", driver, got, want)
		}
		if got := AttacherHeartbeatLeaseName(driver); got == AttacherLeaseName(driver) {
			t.Errorf("heartbeat Lease %q must differ from the shared leader-election Lease", got)
		}
	}
}
