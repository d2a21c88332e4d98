package array

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDecideStorageCut(t *testing.T) {
	fencing := Semantics{Fence: true}
	tests := []struct {
		name  string
		act   unpublishAction
		fence bool
		sem   Semantics
		want  storageCut
	}{
		{name: "fence of a node in use", act: unpublishFence, fence: true, sem: fencing, want: cutFence},
		{name: "fence of a node that cleaned up: fenced anyway, it costs nothing", act: unpublishDetach, fence: true, sem: fencing, want: cutFence},
		{name: "repeated fence re-confirms on the storage", act: unpublishNothing, fence: true, sem: fencing, want: cutFence},
		{name: "plain detach revokes", act: unpublishDetach, sem: fencing, want: cutRevoke},
		{name: "real-array unpublish in use revokes only", act: unpublishUnsafe, sem: fencing, want: cutRevoke},
		{name: "nothing to do", act: unpublishNothing, sem: fencing, want: cutNone},
		{name: "driver without fencing ignores the flag", act: unpublishDetach, fence: true, sem: Semantics{}, want: cutRevoke},
		{name: "lying driver revokes only", act: unpublishUnsafe, fence: true, sem: Semantics{FakeFence: true}, want: cutRevoke},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideStorageCut(tc.act, tc.fence, tc.sem); got != tc.want {
				t.Fatalf("decideStorageCut = %d, want %d", got, tc.want)
			}
		})
	}
}

// fakeStorage records the calls a Storage gets and fails those named in
// fail.
type fakeStorage struct {
	calls []string
	fail  map[string]bool
}

func (f *fakeStorage) do(call string) error {
	f.calls = append(f.calls, call)
	if f.fail[call] {
		return status.Error(codes.Unavailable, call+" failed")
	}
	return nil
}

func (f *fakeStorage) CreateVolume(string, int64) error { return f.do("create") }
func (f *fakeStorage) DeleteVolume(string) error        { return f.do("delete") }
func (f *fakeStorage) Grant(_, node string) (map[string]string, error) {
	return map[string]string{"storage/node": node}, f.do("grant " + node)
}
func (f *fakeStorage) Revoke(_, node string) error { return f.do("revoke " + node) }
func (f *fakeStorage) Fence(_, node string) error  { return f.do("fence " + node) }

// TestStorageFollowsDecisions checks that the array asks its storage to
// act on each decision, and that a storage failure commits nothing, so the
// retry acts again.
func TestStorageFollowsDecisions(t *testing.T) {
	st := &fakeStorage{fail: map[string]bool{"fence a": true}}
	a, err := New(Options{Nodes: []string{"a", "b"}, Semantics: Semantics{Fence: true}, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	id := mustCreate(t, a, "pvc")
	useOn(t, a, id, "a")
	pc, err := a.Publish(id, "a", rwo, false)
	if err != nil || pc["storage/node"] != "a" {
		t.Fatalf("repeated Publish = %v, %v; want the storage's context", pc, err)
	}
	if err := a.Unpublish(id, "a", true); status.Code(err) != codes.Unavailable {
		t.Fatalf("fence with failing storage = %v, want Unavailable", err)
	}
	if v, _ := a.Volume(id); len(v.Fenced) != 0 || v.Attachments["a"] == nil {
		t.Fatalf("a failed storage fence changed the state: %+v", v)
	}
	st.fail = nil
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatalf("retried fence: %v", err)
	}
	if err := a.Unpublish(id, "a", true); err != nil {
		t.Fatalf("repeated fence: %v", err)
	}
	want := []string{"create", "grant a", "grant a", "fence a", "fence a", "fence a"}
	if !reflect.DeepEqual(st.calls, want) {
		t.Fatalf("storage calls = %q, want %q", st.calls, want)
	}
	if err := a.NodeUnpublish("a", id, "/target/a", false, noop); err != nil {
		t.Fatal(err)
	}
	if err := a.NodeUnstage("a", id, "/stage/a", false, noopTargets); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(id, "b", rwo, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Unpublish(id, "b", false); err != nil {
		t.Fatal(err)
	}
	st.fail = map[string]bool{"delete": true}
	if err := a.DeleteVolume(id); status.Code(err) != codes.Unavailable {
		t.Fatalf("DeleteVolume with failing storage = %v", err)
	}
	if _, err := a.Volume(id); err != nil {
		t.Fatalf("a failed storage delete removed the volume: %v", err)
	}
	want = append(want, "grant b", "revoke b", "delete")
	if got := fmt.Sprint(st.calls); got != fmt.Sprint(want) {
		t.Fatalf("storage calls = %s, want %s", got, fmt.Sprint(want))
	}
}
