package persist

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type doc struct {
	Items []string `json:"items"`
}

func load(t *testing.T, s *Store) doc {
	t.Helper()
	var d doc
	if err := s.Load(&d); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return d
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state.json"))
	var d doc
	if err := s.Load(&d); !IsNotExist(err) {
		t.Fatalf("Load of a missing file = %v, want not-exist", err)
	}
	if err := s.Save(doc{Items: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if got := load(t, s); strings.Join(got.Items, ",") != "a,b" {
		t.Fatalf("loaded %v", got)
	}
}

func TestFailedSaveKeepsPreviousDocument(t *testing.T) {
	for _, step := range []Step{StepWrite, StepSync, StepRename} {
		t.Run(string(step), func(t *testing.T) {
			dir := t.TempDir()
			var failAt Step
			s := New(filepath.Join(dir, "state.json"), WithFaultHook(func(st Step) error {
				if st == failAt {
					return errors.New("injected I/O error")
				}
				return nil
			}))
			if err := s.Save(doc{Items: []string{"old"}}); err != nil {
				t.Fatal(err)
			}
			failAt = step
			err := s.Save(doc{Items: []string{"new"}})
			if err == nil || !strings.Contains(err.Error(), string(step)) {
				t.Fatalf("Save = %v, want an error naming step %s", err, step)
			}
			if got := load(t, s); strings.Join(got.Items, ",") != "old" {
				t.Fatalf("after failed save file holds %v, want the old document", got)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("temporary files left behind: %v", entries)
			}
		})
	}
}

func TestFailedDirectorySyncReportsError(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state.json"), WithFaultHook(func(st Step) error {
		if st == StepSyncDir {
			return errors.New("injected fsync error")
		}
		return nil
	}))
	// After the rename the new document is in place but not known durable:
	// Save must say so, so that the caller keeps its old view and retries.
	if err := s.Save(doc{Items: []string{"new"}}); err == nil {
		t.Fatal("Save succeeded although the directory fsync failed")
	}
}

func TestCorruptFileIsMovedAside(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{name: "truncated", content: `{"items": ["a", "b`},
		{name: "empty", content: ""},
		{name: "garbage", content: "\x00\x00\x00"},
		{name: "wrong type", content: `{"items": 7}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := New(path)
			var d doc
			err := s.Load(&d)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load = %v, want *CorruptError", err)
			}
			if !strings.HasPrefix(ce.MovedTo, path+".corrupt-") {
				t.Fatalf("moved to %q", ce.MovedTo)
			}
			kept, err := os.ReadFile(ce.MovedTo)
			if err != nil || string(kept) != tc.content {
				t.Fatalf("corrupt file not kept intact: %q, %v", kept, err)
			}
			// The next start finds no file rather than the same corruption.
			if err := s.Load(&d); !IsNotExist(err) {
				t.Fatalf("second Load = %v, want not-exist", err)
			}
		})
	}
}

func TestLoadRemovesTempFilesOfACrashedSave(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state.json"))
	if err := s.Save(doc{Items: []string{"kept"}}); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "state.json.tmp-123")
	if err := os.WriteFile(stale, []byte(`{"items": ["half`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := load(t, s); strings.Join(got.Items, ",") != "kept" {
		t.Fatalf("loaded %v", got)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temp file still there: %v", err)
	}
}
