package fencesanity

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/pkg/fence/sanity"
)

// buildBinaries builds the fence-sanity command and the mock driver into a
// temporary directory, so that the test runs the code of this checkout.
func buildBinaries(t *testing.T) (fenceSanity, mockDriver string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
		"fenceline.io/fenceline/pkg/fence/cmd/fence-sanity", "fenceline.io/fenceline/mock-driver")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "fence-sanity"), filepath.Join(dir, "mock-driver")
}

// startMockBinary runs the mock driver binary with the controller on its
// own socket and node-1, node-2 on theirs (named <node>.sock), and waits
// until every socket exists.
func startMockBinary(t *testing.T, bin, dir string, extra ...string) {
	t.Helper()
	args := append([]string{
		"--endpoint=unix://" + filepath.Join(dir, "controller.sock"),
		"--node-endpoint=node-1=unix://" + filepath.Join(dir, "node-1.sock"),
		"--node-endpoint=node-2=unix://" + filepath.Join(dir, "node-2.sock"),
		"--state-dir=" + filepath.Join(dir, "state"), "-v=0",
	}, extra...)
	var logs bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range []string{"controller.sock", "node-1.sock", "node-2.sock"} {
		for {
			if _, err := os.Stat(filepath.Join(dir, s)); err == nil {
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("mock driver exited before listening: %v\n%s", err, logs.String())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("mock driver did not create %s within 30s\n%s", s, logs.String())
			}
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestFenceSanityCommand runs the fence-sanity binary against the mock
// driver binary, with `mock-driver write` as the I/O hook: every case of a
// conforming mock passes, a mock lying about UNPUBLISH_FENCE fails the
// case that checks it (and the command exits 1), a bad command line exits 2.
func TestFenceSanityCommand(t *testing.T) {
	fenceSanity, mock := buildBinaries(t)
	tests := []struct {
		name      string
		mockArgs  []string
		noDriver  bool
		extraArgs []string
		wantExit  int
		wantLines []string
	}{
		{name: "conforming mock, strict", wantExit: 0, wantLines: casesWith(sanity.Pass)},
		{name: "conforming mock, real-array", mockArgs: []string{"--unpublish-mode=real-array"}, wantExit: 0, wantLines: casesWith(sanity.Pass)},
		{
			name:     "mock lying about UNPUBLISH_FENCE",
			mockArgs: []string{"--fence=false", "--fake-fence", "--unpublish-mode=real-array"},
			wantExit: 1,
			wantLines: []string{
				"PASS discovery", "FAIL fence-cuts-io: I/O from node node-1", "FAIL no-republish-before-cleanup:",
				"FAIL volume-moves: fenced node node-1 can still write", "FAIL fence-without-node-id:",
				"FAIL list-fences: ListFences (node_id \"\") shows no fence of node node-1", "FAIL lift-fence:",
				"fence-sanity summary: pass=6 fail=7 skip=0",
			},
		},
		{
			name:     "mock without the extension",
			mockArgs: []string{"--fence=false", "--force-unpublish=false", "--list-fences=false", "--lift-fence=false"},
			wantExit: 0,
			wantLines: []string{
				"PASS discovery", "SKIP fence-cuts-io: the controller does not advertise UNPUBLISH_FENCE", "SKIP force-unpublish: node node-1 does not advertise FORCE_UNPUBLISH",
				"SKIP list-fences: the controller does not advertise LIST_FENCES", "SKIP lift-fence: the controller does not advertise LIFT_FENCE",
			},
		},
		{
			name:     "mock that lists fences but does not lift them",
			mockArgs: []string{"--lift-fence=false"},
			wantExit: 0,
			wantLines: []string{
				"PASS list-fences", "PASS list-fences-pagination", "SKIP lift-fence: the controller does not advertise LIFT_FENCE",
				"fence-sanity summary: pass=12 fail=0 skip=1",
			},
		},
		{name: "flag error", noDriver: true, extraArgs: []string{"--timeout=soon"}, wantExit: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Unix socket paths are short: keep them out of the long
			// test-named temp directory.
			dir, err := os.MkdirTemp("", "fs")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			if !tc.noDriver {
				startMockBinary(t, mock, dir, tc.mockArgs...)
			}
			ioCommand := shellQuote(mock) + " write --endpoint=unix://" + shellQuote(dir) + "/{node}.sock --volume={volume}"
			args := append([]string{
				"--controller-endpoint=unix://" + filepath.Join(dir, "controller.sock"),
				"--node-endpoint=node-1=unix://" + filepath.Join(dir, "node-1.sock"),
				"--node-endpoint=unix://" + filepath.Join(dir, "node-2.sock"),
				"--io-command=" + ioCommand,
			}, tc.extraArgs...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, fenceSanity, args...).CombinedOutput()
			exit := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				exit = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tc.wantExit {
				t.Errorf("exit %d, want %d", exit, tc.wantExit)
			}
			for _, l := range tc.wantLines {
				if !containsLinePrefix(string(out), l) {
					t.Errorf("output lacks a line starting %q", l)
				}
			}
			if t.Failed() {
				t.Logf("fence-sanity output:\n%s", out)
			}
		})
	}
}

// casesWith is the line "<status> <case>" of every case.
func casesWith(s sanity.Status) []string {
	var lines []string
	for _, c := range sanity.Cases() {
		lines = append(lines, string(s)+" "+c)
	}
	return lines
}

// containsLinePrefix says whether out has the line want, or, when want
// holds a colon (a case with its reason), a line starting with want.
func containsLinePrefix(out, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l == want || strings.Contains(want, ":") && strings.HasPrefix(l, want) {
			return true
		}
	}
	return false
}
