package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeTargets returns each Makefile rule's prerequisites by target, for
// rules of the form `name: prerequisites ## help` or without help.
func makeTargets(t testing.TB) map[string][]string {
	t.Helper()
	rule := regexp.MustCompile(`^([a-zA-Z0-9_-]+):([^=#]*)(##.*)?$`)
	out := map[string][]string{}
	for _, l := range strings.Split(readRepoFile(t, "Makefile"), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			out[m[1]] = strings.Fields(m[2])
		}
	}
	return out
}

// TestMakefileProgressGoals: the goal lists that size the progress count of
// the tool builds name exactly the targets that build those tools, and each
// such target announces the wait before building anything.
func TestMakefileProgressGoals(t *testing.T) {
	makefile := readRepoFile(t, "Makefile")
	targets := makeTargets(t)
	for _, group := range []struct{ variable, prerequisite string }{
		{"GOALS_NEEDING_CONTROL_PLANE", "control-plane"},
		{"GOALS_NEEDING_PROMTOOL", "promtool"},
		{"GOALS_NEEDING_UPSTREAM_ATTACHER", "upstream-attacher"},
		{"GOALS_NEEDING_UPSTREAM_E2E", "upstream-e2e"},
		{"GOALS_NEEDING_NODE_TOOLS", "node-tools"},
		{"GOALS_NEEDING_CAPI", "capi"},
	} {
		t.Run(group.variable, func(t *testing.T) {
			listed := strings.Fields(makeVariable(t, makefile, group.variable))
			for name, prereqs := range targets {
				builds := name == group.prerequisite || slices.Contains(prereqs, group.prerequisite)
				if builds != slices.Contains(listed, name) {
					t.Errorf("target %s: builds %s = %v, but %s lists it = %v", name, group.prerequisite, builds, group.variable, !builds)
				}
				if builds && (len(prereqs) == 0 || prereqs[0] != "tools-notice") {
					t.Errorf("target %s: prerequisites %q, want tools-notice first, so that the wait is announced before the build", name, prereqs)
				}
			}
		})
	}
}

// TestMakeToolsProgress runs `make -n` (nothing is built) and checks the
// numbered steps of a first build, counted over the tools the goal still
// needs.
func TestMakeToolsProgress(t *testing.T) {
	makeCmd, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("no make: %v", err)
	}
	tests := []struct {
		goal    string
		present []string // tools already built
		want    []string // the step lines, in order
	}{
		{
			goal: "tools",
			want: []string{"[1/7] building etcd", "[2/7] building kube-apiserver", "[3/7] building kube-controller-manager",
				"[4/7] building kube-scheduler", "[5/7] building kubectl", "[6/7] building kwok", "[7/7] building promtool"},
		},
		{
			goal:    "demo",
			present: []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"},
			want:    []string{"[1/2] building kubectl", "[2/2] building kwok"},
		},
		{
			goal:    "test",
			present: []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "promtool", "promql-metrics"},
			want: []string{"[1/5] building upstream csi-attacher", "[2/5] building upstream's node e2e tests",
				"[3/5] building kubelet", "[4/5] building fake-cri", "[5/5] building capi-mhc"},
		},
		{
			goal:    "demo",
			present: []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"},
		},
		{
			goal: "test-unit",
			want: []string{"[1/1] building promtool"},
		},
	}
	step := regexp.MustCompile(`>> (\[\d+/\d+\] building (upstream csi-attacher|upstream's node e2e tests|[a-z-]+))`)
	for _, tc := range tests {
		t.Run(tc.goal+"/"+strings.Join(tc.present, ","), func(t *testing.T) {
			bin := t.TempDir()
			for _, tool := range tc.present {
				// Newer than any go.mod, so that make sees it as current.
				if err := os.WriteFile(filepath.Join(bin, tool), nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(makeCmd, "-n", "-C", repoRoot(t), tc.goal, "TOOLS_BIN="+bin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %s: %v\n%s", tc.goal, err, out)
			}
			var got []string
			for _, m := range step.FindAllStringSubmatch(string(out), -1) {
				got = append(got, m[1])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("steps %q, want %q\n%s", got, tc.want, out)
			}
			notice := strings.Contains(string(out), "waits on a first build")
			if notice != (len(tc.want) > 0) {
				t.Errorf("wait announced = %v, want %v\n%s", notice, len(tc.want) > 0, out)
			}
		})
	}
}
