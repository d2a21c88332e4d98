package array

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/persist"
)

func noop() error                { return nil }
func noopTargets([]string) error { return nil }

// newTestArray returns an array with nodes a and b persisted in a temp dir.
func newTestArray(t *testing.T, sem Semantics, opts ...persist.Option) (*Array, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.json")
	a, err := New(Options{Store: persist.New(path, opts...), Nodes: []string{"a", "b"}, Semantics: sem})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a, path
}

func mustCreate(t *testing.T, a *Array, name string) string {
	t.Helper()
	v, err := a.CreateVolume(name, 1<<20, 0, nil)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	return v.ID
}

// useOn attaches, stages and publishes the volume on node.
func useOn(t *testing.T, a *Array, id, node string) {
	t.Helper()
	if _, err := a.Publish(id, node, rwo, false); err != nil {
		t.Fatalf("Publish to %s: %v", node, err)
	}
	if err := a.NodeStage(node, id, "/stage/"+node, rwo, noop); err != nil {
		t.Fatalf("NodeStage on %s: %v", node, err)
	}
	if err := a.NodePublish(node, id, "/target/"+node, "/stage/"+node, rwo, false, noop); err != nil {
		t.Fatalf("NodePublish on %s: %v", node, err)
	}
}

func TestFencedFailover(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	if err := a.Write("a", id); err != nil {
		t.Fatalf("write from a before fence: %v", err)
	}

	// Node a is unreachable; the volume must move to b.
	_, err := a.Publish(id, "b", rwo, false)
	wantCode(t, err, codes.FailedPrecondition) // double attach refused
	wantCode(t, a.Unpublish(id, "a", false), codes.FailedPrecondition)
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatalf("fenced unpublish: %v", err)
	}
	wantCode(t, a.Write("a", id), codes.PermissionDenied)
	useOn(t, a, id, "b")
	if err := a.Write("b", id); err != nil {
		t.Fatalf("write from b after failover: %v", err)
	}

	// a comes back: it may not have the volume again until it cleaned up.
	// Its kubelet sends no force (the upstream kubelet never does); that
	// is the clean-up all the same.
	wantCode(t, a.NodeStage("a", id, "/stage/a", rwo, noop), codes.FailedPrecondition)
	wantCode(t, a.NodePublish("a", id, "/target/a", "/stage/a", rwo, false, noop), codes.FailedPrecondition)
	if err := a.NodeUnpublish("a", id, "/target/a", false, noop); err != nil {
		t.Fatalf("unforced NodeUnpublish: %v", err)
	}
	if _, fenced := a.Snapshot().Volumes[id].Fenced["a"]; !fenced {
		t.Fatal("quarantine lifted while a still has the volume staged")
	}
	if err := a.NodeUnstage("a", id, "/stage/a", false, noopTargets); err != nil {
		t.Fatalf("unforced NodeUnstage: %v", err)
	}
	v := a.Snapshot().Volumes[id]
	if _, fenced := v.Fenced["a"]; fenced {
		t.Fatal("quarantine not lifted after unforced clean-up")
	}
	if v.Nodes["a"].InUse() {
		t.Fatalf("node a still holds the volume: %+v", v.Nodes["a"])
	}
	wantCode(t, a.Write("a", id), codes.FailedPrecondition)
	if got, want := v.PublishedNodes(), []string{"b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("published nodes = %v, want %v", got, want)
	}
}

// TestMemoryOnlyArray: an array without a Store changes its state in place
// instead of on a copy. It answers as a persisted one does, and what it
// hands out (snapshots, volumes) stays a copy that its later changes leave
// alone.
func TestMemoryOnlyArray(t *testing.T) {
	a, err := New(Options{Nodes: []string{"a", "b"}, Semantics: strict})
	if err != nil {
		t.Fatal(err)
	}
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	before := a.Snapshot()
	vol, err := a.Volume(id)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Publish(id, "b", rwo, false)
	wantCode(t, err, codes.FailedPrecondition)
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatalf("fenced unpublish: %v", err)
	}
	wantCode(t, a.Write("a", id), codes.PermissionDenied)
	useOn(t, a, id, "b")
	if got, want := a.Snapshot().Volumes[id].PublishedNodes(), []string{"b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("published nodes = %v, want %v", got, want)
	}
	for what, v := range map[string]*Volume{"snapshot": before.Volumes[id], "volume": vol} {
		if got, want := v.PublishedNodes(), []string{"a"}; !reflect.DeepEqual(got, want) || len(v.Fenced) != 0 {
			t.Errorf("%s taken before the fence changed with the array: published %v, fenced %v", what, got, v.Fenced)
		}
	}
	if err := a.DeleteVolume(id); err == nil {
		t.Fatal("deleted a volume still in use")
	}
}

// TestFenceAfterCleanupLeavesNoQuarantine: a node that already ran its
// node-side clean-up (it holds nothing of the volume) is detached by a fenced
// unpublish without a quarantine. The real kubelet never cleans up a volume
// twice, so a quarantine would keep the volume off that node for ever.
func TestFenceAfterCleanupLeavesNoQuarantine(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	if _, err := a.Publish(id, "a", rwo, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.Write("a", id), codes.FailedPrecondition)
	if _, err := a.Publish(id, "a", rwo, false); err != nil {
		t.Fatalf("publish to a node that holds nothing after a fence: %v", err)
	}
}

func TestRealArrayUnpublishKeepsWriteAccess(t *testing.T) {
	a, _ := newTestArray(t, Semantics{Fence: true, ForceUnpublish: true, Unpublish: UnpublishRealArray})
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	if err := a.Unpublish(id, "a", false); err != nil {
		t.Fatalf("unsafe unpublish: %v", err)
	}
	useOn(t, a, id, "b")
	// Both nodes can now write: the corruption fencing prevents.
	for _, n := range []string{"a", "b"} {
		if err := a.Write(n, id); err != nil {
			t.Errorf("write from %s: %v", n, err)
		}
	}
}

func TestDriverWithoutFenceIgnoresFenceFlag(t *testing.T) {
	a, _ := newTestArray(t, Semantics{ForceUnpublish: true})
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	wantCode(t, a.Unpublish(id, "a", true), codes.FailedPrecondition)
	if err := a.Write("a", id); err != nil {
		t.Fatalf("a lost access although the driver cannot fence: %v", err)
	}
}

func TestUnpublishAllNodes(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	for _, n := range []string{"a", "b"} {
		if _, err := a.Publish(id, n, rwx, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unpublish(id, "", false); err != nil {
		t.Fatal(err)
	}
	if got := a.Snapshot().Volumes[id].PublishedNodes(); len(got) != 0 {
		t.Fatalf("still published to %v", got)
	}
}

func TestPublishUnknownVolumeAndNode(t *testing.T) {
	a, _ := newTestArray(t, strict)
	_, err := a.Publish("vol-missing", "a", rwo, false)
	wantCode(t, err, codes.NotFound)
	id := mustCreate(t, a, "pvc")
	_, err = a.Publish(id, "nobody", rwo, false)
	wantCode(t, err, codes.NotFound)
	if err := a.Unpublish("vol-missing", "a", true); err != nil {
		t.Fatalf("unpublish of unknown volume: %v", err)
	}
}

func TestDeleteVolumeInUse(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	wantCode(t, a.DeleteVolume(id), codes.FailedPrecondition)
	if err := a.DeleteVolume("vol-missing"); err != nil {
		t.Fatalf("delete of unknown volume: %v", err)
	}
}

func TestCreateVolumeIdempotencyAndCapacity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	a, err := New(Options{Store: persist.New(path), Capacity: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := a.CreateVolume("pvc", 1<<20, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := a.CreateVolume("pvc", 1<<20, 2<<20, nil)
	if err != nil || v2.ID != v1.ID {
		t.Fatalf("repeat create = %v, %v; want same volume %s", v2, err, v1.ID)
	}
	_, err = a.CreateVolume("pvc", 2<<20, 0, nil)
	wantCode(t, err, codes.AlreadyExists)
	_, err = a.CreateVolume("big", 3<<20, 0, nil)
	wantCode(t, err, codes.ResourceExhausted)
	if got := a.AvailableCapacity(); got != 2<<20 {
		t.Fatalf("available = %d, want %d", got, 2<<20)
	}
}

func TestListVolumesPagination(t *testing.T) {
	a, _ := newTestArray(t, strict)
	want := map[string]bool{}
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		want[mustCreate(t, a, n)] = true
	}
	got := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		vols, next, err := a.ListVolumes(2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			got[v.ID] = true
		}
		// Deleting the last volume of a page must not break the token.
		if len(vols) > 0 {
			if err := a.DeleteVolume(vols[len(vols)-1].ID); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	_, _, err := a.ListVolumes(0, "invalid-token")
	wantCode(t, err, codes.Aborted)
}

func TestStateSurvivesRestart(t *testing.T) {
	a, path := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatal(err)
	}
	before := a.Snapshot()

	b, err := New(Options{Store: persist.New(path), Nodes: []string{"a", "b"}, Semantics: strict})
	if err != nil {
		t.Fatal(err)
	}
	// Compare as JSON: a restart may turn empty maps into nil ones.
	bj, _ := json.Marshal(before)
	aj, _ := json.Marshal(b.Snapshot())
	if string(bj) != string(aj) {
		t.Fatalf("state after restart differs:\nbefore %s\nafter  %s", bj, aj)
	}
	wantCode(t, b.Write("a", id), codes.PermissionDenied)
}

func TestFailedSaveChangesNothing(t *testing.T) {
	fail := false
	a, path := newTestArray(t, strict, persist.WithFaultHook(func(persist.Step) error {
		if fail {
			return errors.New("disk full")
		}
		return nil
	}))
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before := a.Snapshot()

	fail = true
	wantCode(t, a.Unpublish(id, "a", true), codes.Internal)
	_, err = a.CreateVolume("other", 1, 0, nil)
	wantCode(t, err, codes.Internal)

	if !reflect.DeepEqual(before, a.Snapshot()) {
		t.Fatal("memory changed although the save failed")
	}
	if err := a.Write("a", id); err != nil {
		t.Fatalf("a lost access although the fence was not persisted: %v", err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(onDisk) {
		t.Fatal("state file changed although the save failed")
	}

	// Once the disk recovers, the retried fence goes through.
	fail = false
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.Write("a", id), codes.PermissionDenied)
}

func TestCorruptStateIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte(`{"volumes": {"vol-1": {"id": "vol-1", "na`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Store: persist.New(path), Nodes: []string{"a"}})
	if err != nil {
		t.Fatalf("New with a corrupt file: %v", err)
	}
	rec := a.Recovered()
	if rec == nil {
		t.Fatal("Recovered() = nil for a corrupt file")
	}
	if _, err := os.Stat(rec.MovedTo); err != nil {
		t.Fatalf("corrupt file not kept aside: %v", err)
	}
	if len(a.Snapshot().Volumes) != 0 {
		t.Fatal("array did not start empty")
	}
	mustCreate(t, a, "pvc")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("new state file not written: %v", err)
	}
}

func TestInconsistentStateIsMovedAside(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{name: "null volume", content: `{"volumes":{"vol-1":null}}`},
		{name: "misfiled volume", content: `{"volumes":{"vol-1":{"id":"vol-2"}}}`},
		{name: "null attachment", content: `{"volumes":{"vol-1":{"id":"vol-1","attachments":{"a":null}}}}`},
		{name: "null target", content: `{"volumes":{"vol-1":{"id":"vol-1","nodes":{"a":{"targets":{"/t":null}}}}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := New(Options{Store: persist.New(path)})
			if err != nil {
				t.Fatal(err)
			}
			if a.Recovered() == nil {
				t.Fatal("inconsistent state loaded instead of being moved aside")
			}
			if n := len(a.Snapshot().Volumes); n != 0 {
				t.Fatalf("array started with %d volumes", n)
			}
		})
	}
}

func TestNodeUnstage(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	wantCode(t, a.NodeUnstage("a", id, "/stage/a", false, noopTargets), codes.FailedPrecondition)

	var removed []string
	if err := a.NodeUnstage("a", id, "/stage/a", true, func(targets []string) error { removed = targets; return nil }); err != nil {
		t.Fatalf("forced unstage: %v", err)
	}
	if !reflect.DeepEqual(removed, []string{"/target/a"}) {
		t.Fatalf("forced unstage removed %v, want the published target too", removed)
	}
	if a.Snapshot().Volumes[id].Nodes["a"].InUse() {
		t.Fatal("node a still uses the volume after a forced unstage")
	}
	// Unstaging again, or at a path never staged, is an idempotent success.
	if err := a.NodeUnstage("a", id, "/stage/a", false, noopTargets); err != nil {
		t.Fatalf("repeated unstage: %v", err)
	}
	wantCode(t, a.NodeUnstage("a", "vol-missing", "/stage/a", false, noopTargets), codes.NotFound)
}

func TestNodeIOFailureRecordsNothing(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	if _, err := a.Publish(id, "a", rwo, false); err != nil {
		t.Fatal(err)
	}
	mountErr := errors.New("mkdir: read-only file system")
	if err := a.NodeStage("a", id, "/stage/a", rwo, func() error { return mountErr }); !errors.Is(err, mountErr) {
		t.Fatalf("NodeStage = %v, want the mount error", err)
	}
	if a.Snapshot().Volumes[id].Nodes["a"].InUse() {
		t.Fatal("failed stage was recorded")
	}
}

func TestNodeVolumePath(t *testing.T) {
	a, _ := newTestArray(t, strict)
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	for _, p := range []string{"/stage/a", "/target/a"} {
		if _, err := a.NodeVolumePath("a", id, p); err != nil {
			t.Errorf("NodeVolumePath(%s): %v", p, err)
		}
	}
	_, err := a.NodeVolumePath("a", id, "/elsewhere")
	wantCode(t, err, codes.NotFound)
	_, err = a.NodeVolumePath("b", id, "/target/a")
	wantCode(t, err, codes.NotFound)
}
