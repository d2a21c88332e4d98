package audit

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAppendAndReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	want := []Record{
		{Time: now, Method: "ControllerPublishVolume", VolumeID: "v", NodeID: "a", Code: "OK"},
		{Time: now, Method: "ControllerUnpublishVolume", VolumeID: "v", NodeID: "a", Fence: true, Code: "OK"},
		{Time: now, Method: "Write", VolumeID: "v", NodeID: "a", Code: "PermissionDenied", Message: "fenced"},
		{Time: now, Method: "NodeUnstageVolume", VolumeID: "v", NodeID: "a", Force: true, Code: "OK"},
	}
	for _, r := range want {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(want[0]); err == nil {
		t.Fatal("Append after Close succeeded")
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseToleratesTruncatedLastLineOnly(t *testing.T) {
	good := `{"time":"2026-01-01T00:00:00Z","method":"Write","code":"OK"}` + "\n"
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "clean", in: good + good, want: 2},
		{name: "killed mid-append", in: good + `{"time":"2026-01-01T00:00:00Z","meth`, want: 1},
		{name: "corrupt line in the middle", in: good + "not json\n" + good, wantErr: "line 2"},
		{name: "empty", in: "", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != tc.want {
				t.Fatalf("got %d records, %v; want %d", len(got), err, tc.want)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	if _, err := ReadFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

func TestQueries(t *testing.T) {
	recs := []Record{
		{Method: "ControllerPublishVolume", NodeID: "a", VolumeID: "v", Code: "OK"},
		{Method: "Write", NodeID: "a", VolumeID: "v", Code: "OK"},
		{Method: "ControllerUnpublishVolume", NodeID: "a", VolumeID: "v", Fence: true, Code: "OK"},
		{Method: "Write", NodeID: "a", VolumeID: "v", Code: "PermissionDenied"},
		{Method: "ControllerPublishVolume", NodeID: "b", VolumeID: "v", Code: "OK"},
		{Method: "Write", NodeID: "b", VolumeID: "v", Code: "OK"},
	}
	fence := FirstIndex(recs, Method("ControllerUnpublishVolume"), Fenced(), Node("a"))
	if fence != 2 {
		t.Fatalf("fence at %d, want 2", fence)
	}
	if got := FirstIndex(recs, Method("ControllerPublishVolume"), Node("b"), OK()); got != 4 {
		t.Fatalf("publish to b at %d, want 4", got)
	}
	if got := LastIndex(recs, Method("Write"), Node("a"), OK()); got != 1 {
		t.Fatalf("last accepted write from a at %d, want 1", got)
	}
	if got := Count(recs[fence:], Method("Write"), Node("a"), OK()); got != 0 {
		t.Fatalf("%d accepted writes from a after the fence", got)
	}
	if got := len(Filter(recs, Method("Write"))); got != 3 {
		t.Fatalf("Filter(Write) = %d records, want 3", got)
	}
	if got := FirstIndex(recs, Forced()); got != -1 {
		t.Fatalf("FirstIndex(Forced) = %d, want -1", got)
	}
	if got := Count(recs, Volume("v"), Code("PermissionDenied")); got != 1 {
		t.Fatalf("refused writes = %d, want 1", got)
	}
}
