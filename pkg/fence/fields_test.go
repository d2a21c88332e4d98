package fence

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// Raw encodings used by the tests, spelled out so that the expected wire
// format is visible (and matches docs/fence-extension.md).
var (
	fenceTrue  = []byte{0x20, 0x01} // field 4, varint, 1
	fenceFalse = []byte{0x20, 0x00} // field 4, varint, 0
	forceTrue  = []byte{0x18, 0x01} // field 3, varint, 1
	// otherField is an unrelated unknown field (number 99, varint 7) that the
	// setters must keep.
	otherField = []byte{0x98, 0x06, 0x07}
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// unpublishWithUnknown builds a ControllerUnpublishVolumeRequest whose unknown
// fields are exactly raw.
func unpublishWithUnknown(raw []byte) *csi.ControllerUnpublishVolumeRequest {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
	req.ProtoReflect().SetUnknown(raw)
	return req
}

// readAfterDecoding returns a function that decodes wire bytes as the
// official request type of read and applies read to the result.
func readAfterDecoding[T any, PT interface {
	*T
	proto.Message
}](read func(PT) bool) func(wire []byte) (bool, error) {
	return func(wire []byte) (bool, error) {
		req := PT(new(T))
		err := proto.Unmarshal(wire, req)
		return read(req), err
	}
}

func TestIsFencedUnknownFields(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want bool
	}{
		{name: "absent", raw: nil, want: false},
		{name: "true", raw: fenceTrue, want: true},
		{name: "explicit false", raw: fenceFalse, want: false},
		{name: "last value wins, true then false", raw: cat(fenceTrue, fenceFalse), want: false},
		{name: "last value wins, false then true", raw: cat(fenceFalse, fenceTrue), want: true},
		{name: "any non-zero varint is true", raw: []byte{0x20, 0x02}, want: true},
		{name: "multi-byte varint 128", raw: []byte{0x20, 0x80, 0x01}, want: true},
		{name: "non-minimal encoding of zero", raw: []byte{0x20, 0x80, 0x00}, want: false},
		{name: "among other unknown fields", raw: cat(otherField, fenceTrue, otherField), want: true},
		{name: "force field number is not fence", raw: forceTrue, want: false},
		{name: "wrong wire type (fixed64) is ignored", raw: []byte{0x21, 1, 0, 0, 0, 0, 0, 0, 0}, want: false},
		{name: "wrong wire type (bytes) is ignored", raw: []byte{0x22, 0x01, 0x01}, want: false},
		{name: "wrong wire type does not reset an earlier true", raw: cat(fenceTrue, []byte{0x22, 0x01, 0x00}), want: true},
		{name: "truncated varint", raw: []byte{0x20}, want: false},
		{name: "truncated multi-byte varint", raw: []byte{0x20, 0x80}, want: false},
		{name: "overlong varint", raw: append([]byte{0x20}, bytes.Repeat([]byte{0xff}, 11)...), want: false},
		{name: "field number zero", raw: []byte{0x00, 0x01}, want: false},
		{name: "lone end-group", raw: []byte{0x24}, want: false},
		{name: "largest valid field number before fence", raw: cat([]byte{0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01}, fenceTrue), want: true},
		{name: "field number above 2^29-1 stops the scan", raw: cat([]byte{0xf8, 0xff, 0xff, 0xff, 0x1f, 0x01}, fenceTrue), want: false},
		{name: "truncated length-delimited field before fence", raw: cat([]byte{0x9a, 0x06, 0x05, 0x01}, fenceTrue), want: false},
		{name: "valid true followed by garbage", raw: cat(fenceTrue, []byte{0xff}), want: true},
		{name: "fence inside a group is not top-level", raw: cat([]byte{0x9b, 0x06}, fenceTrue, []byte{0x9c, 0x06}), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsFenced(unpublishWithUnknown(tc.raw)); got != tc.want {
				t.Errorf("IsFenced(% x) = %v, want %v", tc.raw, got, tc.want)
			}
		})
	}
}

func TestReadersOnNilRequests(t *testing.T) {
	if IsFenced(nil) || IsForcedUnpublish(nil) || IsForcedUnstage(nil) {
		t.Error("a nil request must read as not fenced and not forced")
	}
	// The setters must not panic on nil either.
	SetFence(nil, true)
	SetForceUnpublish(nil, true)
	SetForceUnstage(nil, true)
}

func TestSetFence(t *testing.T) {
	tests := []struct {
		name    string
		before  []byte
		fence   bool
		wantRaw []byte
	}{
		{name: "set on empty", before: nil, fence: true, wantRaw: fenceTrue},
		{name: "clear on empty", before: nil, fence: false, wantRaw: nil},
		{name: "set is idempotent", before: fenceTrue, fence: true, wantRaw: fenceTrue},
		{name: "set removes duplicates", before: cat(fenceTrue, fenceFalse, fenceTrue), fence: true, wantRaw: fenceTrue},
		{name: "clear removes every occurrence", before: cat(fenceTrue, otherField, fenceTrue), fence: false, wantRaw: otherField},
		{name: "keeps other fields in order", before: cat(otherField, fenceFalse, forceTrue), fence: true, wantRaw: cat(otherField, forceTrue, fenceTrue)},
		{name: "removes field 4 of another wire type", before: []byte{0x22, 0x01, 0x01}, fence: true, wantRaw: fenceTrue},
		{name: "drops a malformed tail", before: cat(otherField, []byte{0x20}), fence: true, wantRaw: cat(otherField, fenceTrue)},
		{name: "drops an invalid field number and what follows", before: cat(otherField, []byte{0xf8, 0xff, 0xff, 0xff, 0x1f, 0x01}, otherField), fence: true, wantRaw: cat(otherField, fenceTrue)},
		{name: "drops a malformed tail when clearing", before: cat(otherField, []byte{0xff}), fence: false, wantRaw: otherField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := unpublishWithUnknown(tc.before)
			SetFence(req, tc.fence)
			got := req.ProtoReflect().GetUnknown()
			if !bytes.Equal(got, tc.wantRaw) {
				t.Errorf("unknown fields = % x, want % x", got, tc.wantRaw)
			}
			if IsFenced(req) != tc.fence {
				t.Errorf("IsFenced after SetFence(%v) = %v", tc.fence, !tc.fence)
			}
			if req.GetVolumeId() != "vol-1" || req.GetNodeId() != "node-1" {
				t.Errorf("known fields changed: %v", req)
			}
		})
	}
}

func TestForceSettersAndReaders(t *testing.T) {
	for _, force := range []bool{true, false} {
		unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/t"}
		unpub.ProtoReflect().SetUnknown(cat(otherField, forceTrue))
		SetForceUnpublish(unpub, force)
		SetForceUnpublish(unpub, force)
		if got := IsForcedUnpublish(unpub); got != force {
			t.Errorf("IsForcedUnpublish after SetForceUnpublish(%v) = %v", force, got)
		}
		if IsFenced(&csi.ControllerUnpublishVolumeRequest{}) {
			t.Error("empty ControllerUnpublishVolumeRequest reads as fenced")
		}

		unstage := &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s"}
		SetForceUnstage(unstage, force)
		SetForceUnstage(unstage, force)
		if got := IsForcedUnstage(unstage); got != force {
			t.Errorf("IsForcedUnstage after SetForceUnstage(%v) = %v", force, got)
		}
		wantRaw := []byte(nil)
		if force {
			wantRaw = forceTrue
		}
		if got := unstage.ProtoReflect().GetUnknown(); !bytes.Equal(got, wantRaw) {
			t.Errorf("unstage unknown fields = % x, want % x", got, wantRaw)
		}
	}
}

// TestOverlayMessagesMatchWire checks, in both directions, that the overlay
// messages of the .proto describe exactly what the setters put on the wire:
// a request marshalled by a CO using SetFence decodes as the overlay message
// with the field set, and an overlay message decodes as an official request
// that the readers see as set.
func TestOverlayMessagesMatchWire(t *testing.T) {
	t.Run("fence set by SetFence decodes as the overlay", func(t *testing.T) {
		req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
		SetFence(req, true)
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var overlay fencev1.ControllerUnpublishVolumeFence
		if err := proto.Unmarshal(wire, &overlay); err != nil {
			t.Fatalf("unmarshal as overlay: %v", err)
		}
		if !overlay.GetFence() {
			t.Errorf("overlay decoded fence = false from % x", wire)
		}
	})

	tests := []struct {
		name    string
		overlay proto.Message
		wantRaw []byte
		read    func([]byte) (bool, error)
	}{
		{name: "fence", overlay: &fencev1.ControllerUnpublishVolumeFence{Fence: true}, wantRaw: fenceTrue, read: readAfterDecoding(IsFenced)},
		{name: "force unpublish", overlay: &fencev1.NodeUnpublishVolumeForce{Force: true}, wantRaw: forceTrue, read: readAfterDecoding(IsForcedUnpublish)},
		{name: "force unstage", overlay: &fencev1.NodeUnstageVolumeForce{Force: true}, wantRaw: forceTrue, read: readAfterDecoding(IsForcedUnstage)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wire, err := proto.Marshal(tc.overlay)
			if err != nil {
				t.Fatalf("marshal overlay: %v", err)
			}
			if !bytes.Equal(wire, tc.wantRaw) {
				t.Errorf("overlay wire = % x, want % x", wire, tc.wantRaw)
			}
			got, err := tc.read(wire)
			if err != nil {
				t.Fatalf("unmarshal as official request: %v", err)
			}
			if !got {
				t.Errorf("reader returned false for a request decoded from the overlay message % x", wire)
			}
		})
	}
}

// TestSetFenceSurvivesMarshalRoundTrip checks that the field set by a CO is
// still there after the request went through the protobuf encoder and
// decoder, as it does on its way through gRPC, and is the same bytes the
// docs promise.
func TestSetFenceSurvivesMarshalRoundTrip(t *testing.T) {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
	SetFence(req, true)
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !bytes.HasSuffix(wire, fenceTrue) {
		t.Errorf("wire % x does not end with % x", wire, fenceTrue)
	}
	var got csi.ControllerUnpublishVolumeRequest
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if !IsFenced(&got) || got.GetVolumeId() != "vol-1" || got.GetNodeId() != "node-1" {
		t.Errorf("after round trip: fenced=%v request=%v", IsFenced(&got), &got)
	}
	if n := countField(got.ProtoReflect().GetUnknown(), FenceFieldNumber); n != 1 {
		t.Errorf("fence field appears %d times, want 1", n)
	}
}

// countField counts the top-level occurrences of num in well-formed raw
// protobuf data.
func countField(b []byte, num protowire.Number) int {
	count := 0
	for len(b) > 0 {
		n, _, l := protowire.ConsumeField(b)
		if l < 0 {
			return count
		}
		if n == num {
			count++
		}
		b = b[l:]
	}
	return count
}
