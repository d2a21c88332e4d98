package array

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var strict = Semantics{Fence: true, ForceUnpublish: true}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %s (%v), want %s", got, err, want)
	}
}

func TestCheckPublish(t *testing.T) {
	tests := []struct {
		name        string
		vol         *Volume
		node        string
		mode        Mode
		readOnly    bool
		max         int64
		onNode      int
		wantAlready bool
		wantCode    codes.Code
	}{
		{name: "first attachment", vol: newVol().build(), node: "a", mode: rwo},
		{name: "repeat is idempotent", vol: newVol().attached("a", rwo).build(), node: "a", mode: rwo, onNode: 1, wantAlready: true},
		{name: "repeat with other read-only flag", vol: newVol().attached("a", rwo).build(), node: "a", mode: rwo, readOnly: true, wantCode: codes.AlreadyExists},
		{name: "repeat with other mode", vol: newVol().attached("a", rwo).build(), node: "a", mode: rwop, wantCode: codes.AlreadyExists},
		{name: "RWO attached elsewhere refuses double attach", vol: newVol().attached("a", rwo).build(), node: "b", mode: rwo, wantCode: codes.FailedPrecondition},
		{name: "RWOP attached elsewhere refuses double attach", vol: newVol().attached("a", rwop).build(), node: "b", mode: rwop, wantCode: codes.FailedPrecondition},
		{name: "RWX request while RWO attached elsewhere", vol: newVol().attached("a", rwo).build(), node: "b", mode: rwx, wantCode: codes.FailedPrecondition},
		{name: "RWX attached elsewhere allows RWX", vol: newVol().attached("a", rwx).build(), node: "b", mode: rwx},
		{name: "ROX attached elsewhere allows ROX", vol: newVol().attached("a", rox).build(), node: "b", mode: rox},
		{name: "fenced old node does not block the new one", vol: newVol().fenced("a").staged("a", "/s").build(), node: "b", mode: rwo},
		{name: "fenced node may not attach again", vol: newVol().fenced("a").build(), node: "a", mode: rwo, wantCode: codes.FailedPrecondition},
		{name: "node at its limit", vol: newVol().build(), node: "a", mode: rwo, max: 2, onNode: 2, wantCode: codes.ResourceExhausted},
		{name: "node below its limit", vol: newVol().build(), node: "a", mode: rwo, max: 2, onNode: 1},
		{name: "repeat at the limit is still idempotent", vol: newVol().attached("a", rwo).build(), node: "a", mode: rwo, max: 1, onNode: 1, wantAlready: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			already, err := checkPublish(tc.vol, tc.node, tc.mode, tc.readOnly, tc.max, tc.onNode)
			wantCode(t, err, tc.wantCode)
			if already != tc.wantAlready {
				t.Errorf("already = %t, want %t", already, tc.wantAlready)
			}
		})
	}
}

func TestDecideUnpublish(t *testing.T) {
	unsafe := Semantics{Fence: true, ForceUnpublish: true, Unpublish: UnpublishRealArray}
	noFence := Semantics{ForceUnpublish: true}
	tests := []struct {
		name     string
		vol      *Volume
		fence    bool
		sem      Semantics
		want     unpublishAction
		wantCode codes.Code
	}{
		{name: "not attached, not used", vol: newVol().build(), sem: strict, want: unpublishNothing},
		{name: "attached, not used: detach", vol: newVol().attached("a", rwo).build(), sem: strict, want: unpublishDetach},
		{name: "strict: staged on node is refused", vol: newVol().attached("a", rwo).staged("a", "/s").build(), sem: strict, wantCode: codes.FailedPrecondition},
		{name: "strict: published on node is refused", vol: newVol().attached("a", rwo).staged("a", "/s").published("a", "/t").build(), sem: strict, wantCode: codes.FailedPrecondition},
		{name: "unsafe: in use detaches and keeps access", vol: newVol().attached("a", rwo).staged("a", "/s").build(), sem: unsafe, want: unpublishUnsafe},
		{name: "fence while in use", vol: newVol().attached("a", rwo).staged("a", "/s").published("a", "/t").build(), fence: true, sem: strict, want: unpublishFence},
		{name: "fence while attached only: nothing to cut off, detach", vol: newVol().attached("a", rwo).build(), fence: true, sem: strict, want: unpublishDetach},
		{name: "fence after unsafe detach still cuts off", vol: newVol().staged("a", "/s").build(), fence: true, sem: unsafe, want: unpublishFence},
		{name: "fence of a node without access", vol: newVol().build(), fence: true, sem: strict, want: unpublishNothing},
		{name: "repeated fence is a no-op", vol: newVol().fenced("a").staged("a", "/s").build(), fence: true, sem: strict, want: unpublishNothing},
		{name: "plain unpublish after fence is a no-op", vol: newVol().fenced("a").staged("a", "/s").build(), sem: strict, want: unpublishNothing},
		{name: "fence ignored by a driver without UNPUBLISH_FENCE", vol: newVol().attached("a", rwo).staged("a", "/s").build(), fence: true, sem: noFence, wantCode: codes.FailedPrecondition},
		{name: "fence ignored without UNPUBLISH_FENCE: plain detach", vol: newVol().attached("a", rwo).build(), fence: true, sem: noFence, want: unpublishDetach},
		{name: "other node's use does not matter", vol: newVol().attached("a", rwx).staged("b", "/s").build(), sem: strict, want: unpublishDetach},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideUnpublish(tc.vol, "a", tc.fence, tc.sem)
			wantCode(t, err, tc.wantCode)
			if got != tc.want {
				t.Errorf("action = %d, want %d", got, tc.want)
			}
		})
	}
}

// codeCase is a case for a rule that only answers with an error: the rule
// runs on vol for node "a".
type codeCase struct {
	name     string
	vol      *Volume
	wantCode codes.Code
}

func runCodeCases(t *testing.T, rule func(v *Volume, node string) error, tests []codeCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, rule(tc.vol, "a"), tc.wantCode)
		})
	}
}

func TestCheckNodeAccess(t *testing.T) {
	withAttach := func(v *Volume, node string) error { return checkNodeAccess(v, node, strict) }
	runCodeCases(t, withAttach, []codeCase{
		{name: "attached", vol: newVol().attached("a", rwo).build()},
		{name: "not attached", vol: newVol().build(), wantCode: codes.FailedPrecondition},
		{name: "attached elsewhere only", vol: newVol().attached("b", rwo).build(), wantCode: codes.FailedPrecondition},
		{name: "fenced", vol: newVol().fenced("a").build(), wantCode: codes.FailedPrecondition},
	})
}

func TestCheckNodeAccessWithoutAttachStep(t *testing.T) {
	noAttach := strict
	noAttach.NoAttach = true
	runCodeCases(t, func(v *Volume, node string) error { return checkNodeAccess(v, node, noAttach) }, []codeCase{
		{name: "never published", vol: newVol().build()},
		{name: "fenced", vol: newVol().fenced("a").build(), wantCode: codes.FailedPrecondition},
	})
}

func TestCleanupForce(t *testing.T) {
	tests := []struct {
		name  string
		force bool
		sem   Semantics
		want  bool
	}{
		{name: "unforced", sem: strict, want: false},
		{name: "forced, honoured", force: true, sem: strict, want: true},
		{name: "forced, FORCE_UNPUBLISH off: ignored", force: true, sem: Semantics{Fence: true}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cleanupForce(tc.force, tc.sem); got != tc.want {
				t.Errorf("cleanupForce(%t) = %t, want %t", tc.force, got, tc.want)
			}
		})
	}
}

// TestUnforcedCleanupLiftsFence is rule 11 of the fence contract: the
// upstream kubelet never sends force, so the node-side clean-up of a fenced
// volume lifts the fence whether forced or not.
func TestUnforcedCleanupLiftsFence(t *testing.T) {
	for _, force := range []bool{false, true} {
		for _, sem := range []Semantics{strict, {Fence: true}} {
			a, _ := newTestArray(t, sem)
			id := mustCreate(t, a, "pvc")
			useOn(t, a, id, "a")
			if err := a.Unpublish(id, "a", true); err != nil {
				t.Fatal(err)
			}
			if err := a.NodeUnpublish("a", id, "/target/a", force, noop); err != nil {
				t.Fatalf("force=%t, %+v: NodeUnpublish of the fenced volume: %v", force, sem, err)
			}
			if err := a.NodeUnstage("a", id, "/stage/a", force, noopTargets); err != nil {
				t.Fatalf("force=%t, %+v: NodeUnstage of the fenced volume: %v", force, sem, err)
			}
			if v := a.Snapshot().Volumes[id]; len(v.Fenced) != 0 {
				t.Fatalf("force=%t, %+v: still fenced after clean-up: %v", force, sem, v.Fenced)
			}
		}
	}
}

func TestCheckWrite(t *testing.T) {
	runCodeCases(t, checkWrite, []codeCase{
		{name: "attached", vol: newVol().attached("a", rwo).build()},
		{name: "attached and published", vol: newVol().attached("a", rwo).staged("a", "/s").published("a", "/t").build()},
		{name: "unsafely detached but still staged keeps access", vol: newVol().staged("a", "/s").build()},
		{name: "not attached, not used", vol: newVol().build(), wantCode: codes.FailedPrecondition},
		{name: "attached to another node only", vol: newVol().attached("b", rwo).build(), wantCode: codes.FailedPrecondition},
		{name: "fenced while still staged", vol: newVol().fenced("a").staged("a", "/s").published("a", "/t").build(), wantCode: codes.PermissionDenied},
		{name: "read-only attachment", vol: newVol().attachedRO("a", rox).build(), wantCode: codes.PermissionDenied},
	})
}

func TestCheckNodePublishTarget(t *testing.T) {
	tests := []struct {
		name        string
		vol         *Volume
		target      string
		mode        Mode
		readOnly    bool
		wantAlready bool
		wantCode    codes.Code
	}{
		{name: "staged", vol: newVol().staged("a", "/s").build(), target: "/t", mode: rwo},
		{name: "not staged", vol: newVol().build(), target: "/t", mode: rwo, wantCode: codes.FailedPrecondition},
		{name: "staged elsewhere", vol: newVol().staged("a", "/other").build(), target: "/t", mode: rwo, wantCode: codes.FailedPrecondition},
		{name: "repeat", vol: newVol().staged("a", "/s").published("a", "/t").build(), target: "/t", mode: rwo, wantAlready: true},
		{name: "repeat read-only", vol: newVol().staged("a", "/s").published("a", "/t").build(), target: "/t", mode: rwo, readOnly: true, wantCode: codes.AlreadyExists},
		{name: "RWO second target", vol: newVol().staged("a", "/s").published("a", "/t").build(), target: "/t2", mode: rwo},
		{name: "RWOP second target", vol: newVol().staged("a", "/s").published("a", "/t").build(), target: "/t2", mode: rwop, wantCode: codes.FailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			already, err := checkNodePublishTarget(tc.vol, "a", tc.target, "/s", tc.mode, tc.readOnly)
			wantCode(t, err, tc.wantCode)
			if already != tc.wantAlready {
				t.Errorf("already = %t, want %t", already, tc.wantAlready)
			}
		})
	}
}
