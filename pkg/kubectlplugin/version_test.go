package kubectlplugin

import (
	"slices"
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

func TestLeaderVersions(t *testing.T) {
	lease := func(name, version string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		l.Namespace, l.Name = "fenceline-system", name
		if version != "" {
			l.Annotations = map[string]string{names.LeaderVersionAnnotation: version}
		}
		return l
	}
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		plugin string
		want   []string
	}{
		{
			name:   "same release",
			leases: []*coordinationv1.Lease{lease("fenceline-controller", "v0.2.0"), lease("fenceline-fence-agent", "v0.2.0")},
			plugin: "v0.2.0",
			want: []string{
				"fenceline-controller (Lease fenceline-system/fenceline-controller): v0.2.0",
				"fenceline-fence-agent (Lease fenceline-system/fenceline-fence-agent): v0.2.0",
			},
		},
		{
			name:   "plugin older than the controller",
			leases: []*coordinationv1.Lease{lease("fenceline-controller", "v0.3.0-rc.1")},
			plugin: "v0.2.0",
			want: []string{
				"fenceline-controller (Lease fenceline-system/fenceline-controller): v0.3.0-rc.1 (warning: this plugin, v0.2.0, is older; it may not know what v0.3.0-rc.1 writes: use the plugin of the release you run)",
				"fenceline-fence-agent: no leader-election Lease found (it runs without --leader-election, or is not installed)",
			},
		},
		{
			name:   "plugin newer",
			leases: []*coordinationv1.Lease{lease("fenceline-controller", "v0.1.0"), lease("fenceline-fence-agent", "")},
			plugin: "v0.2.0",
			want: []string{
				"fenceline-controller (Lease fenceline-system/fenceline-controller): v0.1.0 (warning: this plugin is v0.2.0; use the plugin of the release you run)",
				"fenceline-fence-agent (Lease fenceline-system/fenceline-fence-agent): version not reported",
			},
		},
		{
			name:   "a development build warns about nothing",
			leases: []*coordinationv1.Lease{lease("fenceline-controller", "v0.1.0"), lease("fenceline-fence-agent", "v9.9.9")},
			plugin: "dev",
			want: []string{
				"fenceline-controller (Lease fenceline-system/fenceline-controller): v0.1.0",
				"fenceline-fence-agent (Lease fenceline-system/fenceline-fence-agent): v9.9.9",
			},
		},
		{
			name:   "a version that is not semantic is compared as text",
			leases: []*coordinationv1.Lease{lease("fenceline-controller", "1b22e38"), lease("fenceline-fence-agent", "v0.2.0")},
			plugin: "v0.2.0",
			want: []string{
				"fenceline-controller (Lease fenceline-system/fenceline-controller): 1b22e38 (warning: this plugin is v0.2.0; use the plugin of the release you run)",
				"fenceline-fence-agent (Lease fenceline-system/fenceline-fence-agent): v0.2.0",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaderVersions(tc.leases, tc.plugin); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// version reads the drivers and Leases it prints, not the snapshot status
// and explain read.
func TestVersionReads(t *testing.T) {
	c, k, f := fakeClients(world())
	if _, _, err := run(t, c, "", "version"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range append(k.Actions(), f.Actions()...) {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
	}
	want := []string{"list csidrivers", "list leases", "list leases", "list leases"}
	if !slices.Equal(got, want) {
		t.Errorf("version requested %v, want %v", got, want)
	}
}
