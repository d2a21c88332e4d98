package array

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestLiftFenceRule(t *testing.T) {
	tests := []struct {
		name      string
		vol       *Volume
		node      string
		wantNodes []string // nodes with records afterwards
		wantFence []string // nodes still fenced afterwards
		wantAtt   []string // attachments afterwards
	}{
		{
			name: "fenced node that still holds the volume",
			vol:  newVol().staged("a", "/s/a").published("a", "/t/a").fenced("a").build(),
			node: "a",
		},
		{
			name: "fenced after a partial clean-up",
			vol:  newVol().staged("a", "/s/a").fenced("a").build(),
			node: "a",
		},
		{
			name:      "the volume moved: the new node keeps everything",
			vol:       newVol().staged("a", "/s/a").fenced("a").attached("b", rwo).staged("b", "/s/b").build(),
			node:      "a",
			wantNodes: []string{"b"},
			wantAtt:   []string{"b"},
		},
		{
			name:      "two nodes fenced: only the one named is lifted",
			vol:       newVol().staged("a", "/s/a").fenced("a").staged("b", "/s/b").fenced("b").build(),
			node:      "a",
			wantNodes: []string{"b"},
			wantFence: []string{"b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			liftFence(tc.vol, tc.node)
			if got := sortedKeys(tc.vol.Nodes); !reflect.DeepEqual(got, tc.wantNodes) {
				t.Errorf("node records %v, want %v", got, tc.wantNodes)
			}
			if got := sortedKeys(tc.vol.Fenced); !reflect.DeepEqual(got, tc.wantFence) {
				t.Errorf("fenced %v, want %v", got, tc.wantFence)
			}
			if got := sortedKeys(tc.vol.Attachments); !reflect.DeepEqual(got, tc.wantAtt) {
				t.Errorf("attachments %v, want %v: a lift must not attach", got, tc.wantAtt)
			}
		})
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func sortStrings(s []string) []string {
	slices.Sort(s)
	return s
}

// fencedArray fences node a off two volumes and node b off a third, each
// while the node still uses it, on an array with a recording storage.
func fencedArray(t *testing.T) (*Array, *fakeStorage, []string) {
	t.Helper()
	st := &fakeStorage{}
	a, err := New(Options{Nodes: []string{"a", "b"}, Semantics: Semantics{Fence: true}, Storage: st, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, node := range []string{"a", "a", "b"} {
		id := mustCreate(t, a, fmt.Sprintf("pvc-%d", i))
		useOn(t, a, id, node)
		if err := a.Unpublish(id, node, true); err != nil {
			t.Fatalf("fence %s off %s: %v", node, id, err)
		}
		ids = append(ids, id)
	}
	return a, st, ids
}

func TestListAndLiftFences(t *testing.T) {
	a, st, ids := fencedArray(t)
	key := func(fs []FenceRecord) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Node+"/"+f.Volume)
		}
		return sortStrings(out)
	}
	if got, want := key(a.Fences("")), sortStrings([]string{"a/" + ids[0], "a/" + ids[1], "b/" + ids[2]}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Fences() = %v, want %v", got, want)
	}
	if f := a.Fences("a")[0]; !f.Since.Equal(t0) || !strings.Contains(f.Details, `staged at "/stage/a"`) {
		t.Errorf("fence record %+v: want the time of the fence and what the node holds", f)
	}
	storageCalls := len(st.calls)
	steps := []struct {
		name       string
		node       string
		vols       []string
		wantLifted []string
		wantLeft   []string
	}{
		{"one volume of a", "a", []string{ids[1]}, []string{"a/" + ids[1]}, []string{"a/" + ids[0], "b/" + ids[2]}},
		{"the same again", "a", []string{ids[1]}, nil, []string{"a/" + ids[0], "b/" + ids[2]}},
		{"an unknown volume", "a", []string{"vol-none"}, nil, []string{"a/" + ids[0], "b/" + ids[2]}},
		{"an unknown node", "z", nil, nil, []string{"a/" + ids[0], "b/" + ids[2]}},
		{"every fence of b", "b", nil, []string{"b/" + ids[2]}, []string{"a/" + ids[0]}},
	}
	for _, s := range steps {
		lifted, err := a.LiftFences(s.node, s.vols)
		if err != nil {
			t.Fatalf("%s: LiftFences: %v", s.name, err)
		}
		if got := key(lifted); !reflect.DeepEqual(got, sortStrings(s.wantLifted)) {
			t.Errorf("%s: lifted %v, want %v", s.name, got, s.wantLifted)
		}
		if got := key(a.Fences("")); !reflect.DeepEqual(got, sortStrings(s.wantLeft)) {
			t.Errorf("%s: fences left %v, want %v", s.name, got, s.wantLeft)
		}
	}
	if len(st.calls) != storageCalls {
		t.Errorf("lifting called the storage: %q; a lift grants nothing", st.calls[storageCalls:])
	}
}

// TestLiftGivesNothingBack: after a lift the node cannot write (it is not
// attached), its clean-up of the old paths still answers OK, the volume can
// be published to it again and, unused, deleted.
func TestLiftGivesNothingBack(t *testing.T) {
	a, _, ids := fencedArray(t)
	id := ids[0]
	if _, err := a.LiftFences("a", []string{id}); err != nil {
		t.Fatal(err)
	}
	v, err := a.Volume(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Attachments) != 0 || len(v.Nodes) != 0 || len(v.Fenced) != 0 {
		t.Fatalf("volume after the lift: attachments %v, nodes %v, fenced %v; want nothing", v.Attachments, v.Nodes, v.Fenced)
	}
	wantCode(t, a.Write("a", id), codes.FailedPrecondition)
	if err := a.NodeUnpublish("a", id, "/target/a", false, noop); err != nil {
		t.Fatalf("clean-up of the old target after the lift: %v", err)
	}
	if err := a.NodeUnstage("a", id, "/stage/a", false, noopTargets); err != nil {
		t.Fatalf("clean-up of the old staging path after the lift: %v", err)
	}
	if err := a.DeleteVolume(ids[1]); err == nil {
		t.Fatal("DeleteVolume of a volume a fenced node still holds succeeded; want it refused until the lift")
	}
	if _, err := a.LiftFences("a", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteVolume(ids[1]); err != nil {
		t.Fatalf("DeleteVolume after the lift: %v", err)
	}
	if _, err := a.Publish(id, "a", rwo, false); err != nil {
		t.Fatalf("Publish to the node after the lift: %v", err)
	}
}

// describingStorage adds a FenceDescriber to the recording storage.
type describingStorage struct{ fakeStorage }

func (describingStorage) DescribeFence(volID, node string) string {
	return "initiator of " + node + " out of " + volID
}

func TestFenceDetailsFromStorage(t *testing.T) {
	a, err := New(Options{Nodes: []string{"a"}, Semantics: Semantics{Fence: true}, Storage: &describingStorage{}})
	if err != nil {
		t.Fatal(err)
	}
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatal(err)
	}
	if fs := a.Fences("a"); len(fs) != 1 || !strings.HasSuffix(fs[0].Details, "initiator of a out of "+id) {
		t.Fatalf("Fences = %+v, want the storage's description in the details", fs)
	}
}
