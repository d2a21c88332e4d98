package fence

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// The tests in this file pin the byte-level facts that
// docs/fence-extension.md gives authors of drivers and COs in other
// languages.

// TestAppendedBytesAreReadByDrivers builds requests the way a CO without
// this package would: serialize the official request and append the
// documented bytes (concatenating encoded messages merges them).
func TestAppendedBytesAreReadByDrivers(t *testing.T) {
	tests := []struct {
		name    string
		message proto.Message
		suffix  []byte
		read    func([]byte) (bool, error)
	}{
		{
			name:    "fence on ControllerUnpublishVolume",
			message: &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1", Secrets: map[string]string{"k": "v"}},
			suffix:  []byte{0x20, 0x01},
			read:    readAfterDecoding(IsFenced),
		},
		{
			name:    "force on NodeUnpublishVolume",
			message: &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/target"},
			suffix:  []byte{0x18, 0x01},
			read:    readAfterDecoding(IsForcedUnpublish),
		},
		{
			name:    "force on NodeUnstageVolume",
			message: &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging"},
			suffix:  []byte{0x18, 0x01},
			read:    readAfterDecoding(IsForcedUnstage),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			official, err := proto.Marshal(tc.message)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			for _, wire := range [][]byte{cat(official, tc.suffix), cat(tc.suffix, official)} {
				got, err := tc.read(wire)
				if err != nil {
					t.Fatalf("unmarshal % x: %v", wire, err)
				}
				if !got {
					t.Errorf("reader returned false for % x", wire)
				}
			}
			got, err := tc.read(official)
			if err != nil || got {
				t.Errorf("official request alone: reader returned %v, %v; want false, nil", got, err)
			}
		})
	}
}

func TestCapabilitiesResponseEncoding(t *testing.T) {
	both := &fencev1.GetFenceCapabilitiesResponse{Capabilities: Capabilities{UnpublishFence: true, ForceUnpublish: true}.List()}
	packed, err := proto.Marshal(both)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if want := []byte{0x0a, 0x02, 0x01, 0x02}; !bytes.Equal(packed, want) {
		t.Errorf("response with both capabilities = % x, want % x", packed, want)
	}

	for name, wire := range map[string][]byte{
		"packed":   {0x0a, 0x02, 0x01, 0x02},
		"unpacked": {0x08, 0x01, 0x08, 0x02},
	} {
		var resp fencev1.GetFenceCapabilitiesResponse
		if err := proto.Unmarshal(wire, &resp); err != nil {
			t.Fatalf("%s: unmarshal % x: %v", name, wire, err)
		}
		if got := CapabilitiesFromList(resp.GetCapabilities()); got != (Capabilities{UnpublishFence: true, ForceUnpublish: true}) {
			t.Errorf("%s: decoded %+v", name, got)
		}
	}

	empty, err := proto.Marshal(&fencev1.GetFenceCapabilitiesRequest{})
	if err != nil || len(empty) != 0 {
		t.Errorf("GetFenceCapabilitiesRequest encodes as % x (%v), want no bytes", empty, err)
	}
	for got, want := range map[string]string{
		fencev1.FenceCapabilities_GetFenceCapabilities_FullMethodName: "/fenceline.fence.v1.FenceCapabilities/GetFenceCapabilities",
		fencev1.FenceCapabilities_ListFences_FullMethodName:           "/fenceline.fence.v1.FenceCapabilities/ListFences",
		fencev1.FenceCapabilities_LiftFence_FullMethodName:            "/fenceline.fence.v1.FenceCapabilities/LiftFence",
	} {
		if got != want {
			t.Errorf("full method name = %q, want %q", got, want)
		}
	}
}

// TestNewCapabilitiesKeepTheirWireValues: the values a newer driver sends
// decode the same in a CO of this version, packed or not, and an older CO
// that knows only 1 and 2 ignores 3 and 4 (CapabilitiesFromList skips what
// it does not know, as this version skips 99).
func TestNewCapabilitiesKeepTheirWireValues(t *testing.T) {
	all := Capabilities{UnpublishFence: true, ForceUnpublish: true, ListFences: true, LiftFence: true}
	packed, err := proto.Marshal(&fencev1.GetFenceCapabilitiesResponse{Capabilities: all.List()})
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if want := []byte{0x0a, 0x04, 0x01, 0x02, 0x03, 0x04}; !bytes.Equal(packed, want) {
		t.Errorf("response with every capability = % x, want % x", packed, want)
	}
	for name, wire := range map[string][]byte{
		"packed":           {0x0a, 0x04, 0x01, 0x02, 0x03, 0x04},
		"unpacked":         {0x08, 0x01, 0x08, 0x02, 0x08, 0x03, 0x08, 0x04},
		"newer than these": {0x0a, 0x05, 0x01, 0x02, 0x03, 0x04, 0x63},
	} {
		var resp fencev1.GetFenceCapabilitiesResponse
		if err := proto.Unmarshal(wire, &resp); err != nil {
			t.Fatalf("%s: unmarshal % x: %v", name, wire, err)
		}
		if got := CapabilitiesFromList(resp.GetCapabilities()); got != all {
			t.Errorf("%s: decoded %+v, want %+v", name, got, all)
		}
	}
}

func TestCapabilitiesListRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		caps Capabilities
		want []fencev1.FenceCapability
	}{
		{name: "none", caps: Capabilities{}, want: nil},
		{name: "fence", caps: Capabilities{UnpublishFence: true}, want: []fencev1.FenceCapability{fencev1.FenceCapability_UNPUBLISH_FENCE}},
		{name: "force", caps: Capabilities{ForceUnpublish: true}, want: []fencev1.FenceCapability{fencev1.FenceCapability_FORCE_UNPUBLISH}},
		{name: "both", caps: Capabilities{UnpublishFence: true, ForceUnpublish: true}, want: []fencev1.FenceCapability{fencev1.FenceCapability_UNPUBLISH_FENCE, fencev1.FenceCapability_FORCE_UNPUBLISH}},
		{name: "list", caps: Capabilities{ListFences: true}, want: []fencev1.FenceCapability{fencev1.FenceCapability_LIST_FENCES}},
		{
			name: "all", caps: Capabilities{UnpublishFence: true, ForceUnpublish: true, ListFences: true, LiftFence: true},
			want: []fencev1.FenceCapability{fencev1.FenceCapability_UNPUBLISH_FENCE, fencev1.FenceCapability_FORCE_UNPUBLISH, fencev1.FenceCapability_LIST_FENCES, fencev1.FenceCapability_LIFT_FENCE},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list := tc.caps.List()
			if len(list) != len(tc.want) {
				t.Fatalf("List() = %v, want %v", list, tc.want)
			}
			for i := range list {
				if list[i] != tc.want[i] {
					t.Fatalf("List() = %v, want %v", list, tc.want)
				}
			}
			if back := CapabilitiesFromList(list); back != tc.caps {
				t.Errorf("CapabilitiesFromList(List()) = %+v, want %+v", back, tc.caps)
			}
		})
	}
}
