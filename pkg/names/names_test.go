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

// TestFencingNames pins the fencing names of the node fencing proposal and
// of the research's naming section: they are part of the contract with
// other components and with users' tolerations, so a change must be
// deliberate.
func TestFencingNames(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"triaged condition", FencingTriagedCondition, "FencingTriaged"},
		{"required condition", FencingRequiredCondition, "FencingRequired"},
		{"complete condition", FencingCompleteCondition, "FencingComplete"},
		{"lying fence condition", LyingFenceCondition, "fenceline.io/LyingFence"},
		{"required taint", FencingRequiredTaint, "fenceline.io/fencing-required"},
		{"required taint effect", FencingRequiredTaintEffect, "NoSchedule"},
		{"triaged taint", FencingTriagedTaint, "fenceline.io/fencing-triaged"},
		{"triaged taint effect", FencingTriagedTaintEffect, "PreferNoSchedule"},
		{"out-of-service owner", OutOfServiceOwnerAnnotation, "fenceline.io/out-of-service-owner"},
		{"API group", APIGroup, "fenceline.io"},
		{"API version", APIVersion, "v1alpha1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
