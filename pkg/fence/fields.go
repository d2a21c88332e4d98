package fence

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field numbers of the extension fields inside the official CSI requests.
// They must match api/fence/v1/fenceline_fence.proto; a test checks that the
// official CSI descriptors leave them unused.
const (
	// FenceFieldNumber is the number of the bool fence field on
	// csi.ControllerUnpublishVolumeRequest.
	FenceFieldNumber protowire.Number = 4
	// ForceFieldNumber is the number of the bool force field on
	// csi.NodeUnpublishVolumeRequest and csi.NodeUnstageVolumeRequest.
	ForceFieldNumber protowire.Number = 3
)

// IsFenced reports whether a ControllerUnpublishVolume request asks the driver
// to fence the node off from the volume. It returns false for a nil request,
// when the field is absent, and when it cannot be read (see SetFence for how
// malformed data is handled).
func IsFenced(req *csi.ControllerUnpublishVolumeRequest) bool {
	if req == nil {
		return false
	}
	return getBool(req.ProtoReflect(), FenceFieldNumber)
}

// IsForcedUnpublish reports whether a NodeUnpublishVolume request carries
// force = true. It returns false for a nil request or an absent field.
func IsForcedUnpublish(req *csi.NodeUnpublishVolumeRequest) bool {
	if req == nil {
		return false
	}
	return getBool(req.ProtoReflect(), ForceFieldNumber)
}

// IsForcedUnstage reports whether a NodeUnstageVolume request carries
// force = true. It returns false for a nil request or an absent field.
func IsForcedUnstage(req *csi.NodeUnstageVolumeRequest) bool {
	if req == nil {
		return false
	}
	return getBool(req.ProtoReflect(), ForceFieldNumber)
}

// SetFence sets (fence = true) or clears (fence = false) the fence field of a
// ControllerUnpublishVolume request. It is idempotent: the field appears at
// most once afterwards, and other unknown fields are kept in order. A nil
// request is ignored.
//
// Unknown-field bytes that are not valid protobuf (which only hand-made data
// can contain, since the protobuf decoder rejects such messages) are dropped
// from the first malformed byte on, so that the request encodes to something
// a peer can decode.
func SetFence(req *csi.ControllerUnpublishVolumeRequest, fence bool) {
	if req == nil {
		return
	}
	setBool(req.ProtoReflect(), FenceFieldNumber, fence)
}

// SetForceUnpublish sets or clears the force field of a NodeUnpublishVolume
// request, with the same guarantees as SetFence.
func SetForceUnpublish(req *csi.NodeUnpublishVolumeRequest, force bool) {
	if req == nil {
		return
	}
	setBool(req.ProtoReflect(), ForceFieldNumber, force)
}

// SetForceUnstage sets or clears the force field of a NodeUnstageVolume
// request, with the same guarantees as SetFence.
func SetForceUnstage(req *csi.NodeUnstageVolumeRequest, force bool) {
	if req == nil {
		return
	}
	setBool(req.ProtoReflect(), ForceFieldNumber, force)
}

// getBool returns the proto3 bool value of field num in the unknown fields of
// m: the last varint occurrence wins, any non-zero varint is true, and an
// occurrence with another wire type is ignored, exactly as the protobuf
// decoder treats them. Scanning stops at the first malformed field; values
// seen before it still count.
func getBool(m protoreflect.Message, num protowire.Number) bool {
	b := m.GetUnknown()
	value := false
	for len(b) > 0 {
		n, typ, tagLen, fieldLen := nextField(b)
		if fieldLen < 0 {
			break
		}
		if n == num && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b[tagLen:fieldLen])
			value = protowire.DecodeBool(v)
		}
		b = b[fieldLen:]
	}
	return value
}

// setBool rewrites the unknown fields of m so that field num appears once
// with value true, or not at all for false (proto3 does not encode a false
// bool). Every other well-formed field is kept in its original order;
// occurrences of num with another wire type are removed too, since the
// extension owns that number.
func setBool(m protoreflect.Message, num protowire.Number, value bool) {
	in := m.GetUnknown()
	out := make([]byte, 0, len(in)+2)
	for len(in) > 0 {
		n, _, _, fieldLen := nextField(in)
		if fieldLen < 0 {
			break
		}
		if n != num {
			out = append(out, in[:fieldLen]...)
		}
		in = in[fieldLen:]
	}
	if value {
		out = protowire.AppendTag(out, num, protowire.VarintType)
		out = protowire.AppendVarint(out, protowire.EncodeBool(true))
	}
	if len(out) == 0 {
		out = nil
	}
	m.SetUnknown(out)
}

// nextField parses the field at the start of b and returns its number, wire
// type, the length of its tag and its total length (tag and value). The total
// length is negative when b does not start with a field that the protobuf
// decoder would accept: a bad or truncated tag or value, a field number
// outside 1..2^29-1, or an unbalanced group.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, tagLen, fieldLen int) {
	num, typ, tagLen = protowire.ConsumeTag(b)
	if tagLen < 0 || !num.IsValid() {
		return 0, 0, 0, -1
	}
	valueLen := protowire.ConsumeFieldValue(num, typ, b[tagLen:])
	if valueLen < 0 {
		return 0, 0, 0, -1
	}
	return num, typ, tagLen, tagLen + valueLen
}
