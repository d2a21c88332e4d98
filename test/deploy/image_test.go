package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeDocker is a docker command that logs its arguments, one call a line,
// and answers `docker buildx version` with buildxExit.
const fakeDocker = `#!/bin/sh
echo "$*" >> "$DOCKER_LOG"
if [ "$1 $2" = "buildx version" ]; then exit "$BUILDX_EXIT"; fi
exit 0
`

// TestMakeImage runs `make image` against a fake docker and checks that it
// builds every Dockerfile target under its image name, with the label build
// arguments, through buildx when there is one.
func TestMakeImage(t *testing.T) {
	makeCmd, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("no make: %v", err)
	}
	common := []string{"VERSION=v9.8.7", "REVISION=0123abc", "IMAGE_SOURCE=https://example.com/fenceline"}
	tests := []struct {
		name    string
		docker  bool
		buildx  bool
		vars    []string
		wantErr string
		// wantBuild is the start of each build call; the target, tag and
		// build arguments follow.
		wantBuild string
		wantTag   string // with %s for the target
	}{
		{
			name:      "docker build without buildx",
			docker:    true,
			wantBuild: "build",
			wantTag:   "fenceline-%s:v9.8.7",
		},
		{
			name:      "buildx loads the image for this machine",
			docker:    true,
			buildx:    true,
			vars:      []string{"IMAGE_REGISTRY=registry.example.com/team", "IMAGE_TAG=rc1"},
			wantBuild: "buildx build --load",
			wantTag:   "registry.example.com/team/fenceline-%s:rc1",
		},
		{
			name:      "buildx pushes a multi-arch image",
			docker:    true,
			buildx:    true,
			vars:      []string{"IMAGE_REGISTRY=registry.example.com", "PLATFORMS=linux/amd64,linux/arm64", "IMAGE_PUSH=true"},
			wantBuild: "buildx build --platform=linux/amd64,linux/arm64 --push",
			wantTag:   "registry.example.com/fenceline-%s:v9.8.7",
		},
		{
			name:    "platforms without buildx",
			docker:  true,
			vars:    []string{"PLATFORMS=linux/arm64"},
			wantErr: "need docker buildx",
		},
		{
			name:    "no docker",
			wantErr: "needs Docker",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// PATH holds only the fake docker, if any: the recipe must need
			// nothing else, and a real docker must not be found.
			dir := t.TempDir()
			log := filepath.Join(dir, "docker.log")
			if tc.docker {
				if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			buildxExit := "1"
			if tc.buildx {
				buildxExit = "0"
			}
			cmd := exec.Command(makeCmd, append([]string{"-s", "-C", repoRoot(t), "image"}, append(common, tc.vars...)...)...)
			cmd.Env = []string{"PATH=" + dir, "DOCKER_LOG=" + log, "BUILDX_EXIT=" + buildxExit}
			out, err := cmd.CombinedOutput()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(string(out), tc.wantErr) {
					t.Fatalf("make image: err %v, output %q; want a failure saying %q", err, out, tc.wantErr)
				}
				if calls := buildCalls(t, log); len(calls) != 0 {
					t.Errorf("make image failed but built %q", calls)
				}
				return
			}
			if err != nil {
				t.Fatalf("make image: %v\n%s", err, out)
			}
			calls := buildCalls(t, log)
			if len(calls) != len(imageTargets) {
				t.Fatalf("docker build calls:\n%s\nwant one per target %v", strings.Join(calls, "\n"), imageTargets)
			}
			for _, it := range imageTargets {
				tag := strings.Replace(tc.wantTag, "%s", strings.TrimPrefix(it.Image, "fenceline-"), 1)
				want := tc.wantBuild + " --target " + it.Target + " --tag " + tag +
					" --build-arg VERSION=v9.8.7 --build-arg REVISION=0123abc --build-arg SOURCE=https://example.com/fenceline ."
				if !slices.Contains(calls, want) {
					t.Errorf("no call %q among:\n%s", want, strings.Join(calls, "\n"))
				}
			}
		})
	}
}

// buildCalls returns the logged docker calls that build.
func buildCalls(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(l, "build") && l != "buildx version" {
			calls = append(calls, l)
		}
	}
	return calls
}
