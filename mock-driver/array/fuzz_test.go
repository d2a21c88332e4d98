package array

import (
	"os"
	"path/filepath"
	"testing"

	"fenceline.io/fenceline/mock-driver/persist"
)

// FuzzLoadState feeds arbitrary state files to New: the array must either
// load them or move them aside, and must then serve without panicking.
func FuzzLoadState(f *testing.F) {
	for _, seed := range []string{
		`{"volumes":{}}`,
		`{"volumes":{"vol-1":{"id":"vol-1","name":"p","capacityBytes":1,"attachments":{"a":{"accessMode":1}},"fenced":{"b":"2026-01-01T00:00:00Z"},"nodes":{"b":{"stagingPath":"/s","targets":{"/t":{}}}}}}}`,
		`{"volumes":{"vol-1":null}}`,
		`{"volumes":{"vol-1":{"id":"vol-2"}}}`,
		`{"volumes":{"vol-1":{"id":"vol-1","attachments":{"a":null}}}}`,
		`{"volumes":{"vol-1":{"id":"vol-1","nodes":{"a":{"targets":{"/t":null}}}}}}`,
		`{"volumes":`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := New(Options{Store: persist.New(path), Nodes: []string{"a", "b"}, Semantics: strict})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		for id := range a.Snapshot().Volumes {
			_ = a.Write("a", id)
			_, _ = a.Publish(id, "b", rwo, false)
			_ = a.Unpublish(id, "a", true)
			_ = a.NodeUnstage("b", id, "/s", true, noopTargets)
			_ = a.DeleteVolume(id)
		}
		if _, _, err := a.ListVolumes(1, ""); err != nil {
			t.Fatalf("ListVolumes: %v", err)
		}
		if _, err := a.CreateVolume("after-load", 1, 0, nil); err != nil {
			t.Fatalf("CreateVolume after load: %v", err)
		}
	})
}
