package fence

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// boolFieldAccess bundles what the fuzz targets need to know about one
// extension field.
type boolFieldAccess struct {
	number protowire.Number
	// newRequest returns an official request with raw as unknown fields.
	newRequest func(raw []byte) proto.Message
	get        func(proto.Message) bool
	set        func(proto.Message, bool)
	// newOverlay returns an empty overlay message and a reader for its field:
	// the protobuf runtime's own decoding serves as the reference.
	newOverlay func() (proto.Message, func() bool)
}

var (
	fenceAccess = boolFieldAccess{
		number: FenceFieldNumber,
		newRequest: func(raw []byte) proto.Message {
			return unpublishWithUnknown(raw)
		},
		get: func(m proto.Message) bool { return IsFenced(m.(*csi.ControllerUnpublishVolumeRequest)) },
		set: func(m proto.Message, v bool) { SetFence(m.(*csi.ControllerUnpublishVolumeRequest), v) },
		newOverlay: func() (proto.Message, func() bool) {
			o := &fencev1.ControllerUnpublishVolumeFence{}
			return o, o.GetFence
		},
	}
	forceUnpublishAccess = boolFieldAccess{
		number: ForceFieldNumber,
		newRequest: func(raw []byte) proto.Message {
			req := &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/target"}
			req.ProtoReflect().SetUnknown(raw)
			return req
		},
		get: func(m proto.Message) bool { return IsForcedUnpublish(m.(*csi.NodeUnpublishVolumeRequest)) },
		set: func(m proto.Message, v bool) { SetForceUnpublish(m.(*csi.NodeUnpublishVolumeRequest), v) },
		newOverlay: func() (proto.Message, func() bool) {
			o := &fencev1.NodeUnpublishVolumeForce{}
			return o, o.GetForce
		},
	}
	forceUnstageAccess = boolFieldAccess{
		number: ForceFieldNumber,
		newRequest: func(raw []byte) proto.Message {
			req := &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging"}
			req.ProtoReflect().SetUnknown(raw)
			return req
		},
		get: func(m proto.Message) bool { return IsForcedUnstage(m.(*csi.NodeUnstageVolumeRequest)) },
		set: func(m proto.Message, v bool) { SetForceUnstage(m.(*csi.NodeUnstageVolumeRequest), v) },
		newOverlay: func() (proto.Message, func() bool) {
			o := &fencev1.NodeUnstageVolumeForce{}
			return o, o.GetForce
		},
	}
)

// fuzzBoolField checks the reader and writer of one extension field against
// arbitrary unknown-field bytes:
//   - the reader never panics and, on bytes the protobuf runtime accepts,
//     agrees with the runtime's decoding of the overlay message;
//   - after the writer, the reader returns what was written, the field occurs
//     at most once, the bytes are valid protobuf, a second write changes
//     nothing, and every other well-formed field is kept in order.
func fuzzBoolField(t *testing.T, acc boolFieldAccess, raw []byte) {
	req := acc.newRequest(bytes.Clone(raw))
	got := acc.get(req)

	overlay, overlayValue := acc.newOverlay()
	if err := proto.Unmarshal(raw, overlay); err == nil {
		if want := overlayValue(); got != want {
			t.Fatalf("reader = %v, protobuf runtime decodes %v from % x", got, want, raw)
		}
	}

	wantOthers := otherFields(raw, acc.number)
	for _, value := range []bool{true, false, true} {
		acc.set(req, value)
		out := bytes.Clone(req.ProtoReflect().GetUnknown())
		if g := acc.get(req); g != value {
			t.Fatalf("after set(%v) the reader returns %v; unknown = % x", value, g, out)
		}
		wantCount := 0
		if value {
			wantCount = 1
		}
		if n := countField(out, acc.number); n != wantCount {
			t.Fatalf("after set(%v) field %d occurs %d times: % x", value, acc.number, n, out)
		}
		check, checkValue := acc.newOverlay()
		if err := proto.Unmarshal(out, check); err != nil {
			t.Fatalf("after set(%v) the unknown fields are not valid protobuf: %v: % x", value, err, out)
		}
		if checkValue() != value {
			t.Fatalf("after set(%v) the protobuf runtime decodes %v", value, checkValue())
		}
		if others := otherFields(out, acc.number); !bytes.Equal(others, wantOthers) {
			t.Fatalf("after set(%v) other fields = % x, want % x", value, others, wantOthers)
		}
		acc.set(req, value)
		if again := req.ProtoReflect().GetUnknown(); !bytes.Equal(again, out) {
			t.Fatalf("set(%v) is not idempotent: % x then % x", value, out, again)
		}
	}
}

// otherFields returns the well-formed leading fields of b whose number is not
// num, concatenated in order; it stops at the first malformed field.
func otherFields(b []byte, num protowire.Number) []byte {
	var out []byte
	for len(b) > 0 {
		n, _, _, l := nextField(b)
		if l < 0 {
			break
		}
		if n != num {
			out = append(out, b[:l]...)
		}
		b = b[l:]
	}
	return out
}

// The fuzz targets' seed corpus is committed under testdata/fuzz/<target>:
// hand-written seed-* files for the interesting shapes (documented encodings,
// proto3 edge cases, malformed data) and, under hashed names, inputs the
// fuzzer once found failing. Plain `go test` runs all of them.

// FuzzIsFenced checks IsFenced and SetFence; see fuzzBoolField.
func FuzzIsFenced(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) { fuzzBoolField(t, fenceAccess, raw) })
}

// FuzzIsForcedUnpublish checks IsForcedUnpublish and SetForceUnpublish.
func FuzzIsForcedUnpublish(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) { fuzzBoolField(t, forceUnpublishAccess, raw) })
}

// FuzzIsForcedUnstage checks IsForcedUnstage and SetForceUnstage.
func FuzzIsForcedUnstage(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) { fuzzBoolField(t, forceUnstageAccess, raw) })
}
