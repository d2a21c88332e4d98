package driver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
)

// childEnv names the directory a re-executed test binary serves a driver
// from; see TestMain.
const childEnv = "FENCELINE_MOCK_DRIVER_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	os.Exit(m.Run())
}

// runChild serves a driver until the process is killed.
func runChild(dir string) int {
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "ctrl.sock")
	cfg.NodeID = "node-a"
	if _, err := driver.Start(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

// startChild runs the driver in a subprocess and waits until it answers.
func startChild(t *testing.T, dir string) (*exec.Cmd, csi.ControllerClient) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	cc := dial(t, "unix://"+filepath.Join(dir, "ctrl.sock"))
	ctrl := csi.NewControllerClient(cc)
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := csi.NewIdentityClient(cc).Probe(ctx, &csi.ProbeRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("driver subprocess did not come up: %v", err)
	}
	return cmd, ctrl
}

// TestKillDuringCreatesLosesNothing kills the driver with SIGKILL while
// several clients create volumes, restarts it, and checks that every
// volume whose creation was acknowledged is still there and the state file
// loads cleanly.
func TestKillDuringCreatesLosesNothing(t *testing.T) {
	dir := t.TempDir()
	cmd, ctrl := startChild(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
					Name:               fmt.Sprintf("pvc-%d-%d", g, i),
					VolumeCapabilities: []*csi.VolumeCapability{rwoCap()},
				})
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, resp.GetVolume().GetVolumeId())
				mu.Unlock()
			}
		})
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 40, nil
	})
	if err != nil {
		t.Fatalf("volumes were not created: %v", err)
	}
	// Kill while creates are in flight.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	wg.Wait()
	cancel()

	_, ctrl = startChild(t, dir)
	list, err := ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range list.GetEntries() {
		have[e.GetVolume().GetVolumeId()] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range acked {
		if !have[id] {
			t.Errorf("acknowledged volume %s lost by the kill", id)
		}
	}
	t.Logf("%d volumes acknowledged before the kill, %d present after restart", len(acked), len(have))
	recs, err := audit.ReadFile(filepath.Join(dir, "state", driver.AuditFile))
	if err != nil {
		t.Fatalf("audit log unreadable after the kill: %v", err)
	}
	if n := audit.Count(recs, audit.Method("LoadState")); n != 0 {
		t.Fatalf("state file needed recovery after a kill: %+v", audit.Filter(recs, audit.Method("LoadState")))
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "state", "*.tmp-*")); len(tmps) != 0 {
		t.Fatalf("temporary files of the killed save left behind: %v", tmps)
	}
}
