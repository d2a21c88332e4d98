package fence

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// TestExtensionFieldsAreFreeInOfficialMessages reads the official CSI
// descriptors linked into this binary, so that a spec bump that starts using
// (or reserving) one of our field numbers fails here instead of silently
// changing the meaning of a request.
func TestExtensionFieldsAreFreeInOfficialMessages(t *testing.T) {
	if err := CheckSpec(); err != nil {
		t.Error(err)
	}
	tests := []struct {
		name    string
		number  protowire.Number
		overlay proto.Message
		field   protoreflect.Name
	}{
		{
			name:    "fence on ControllerUnpublishVolumeRequest",
			number:  FenceFieldNumber,
			overlay: &fencev1.ControllerUnpublishVolumeFence{},
			field:   "fence",
		},
		{
			name:    "force on NodeUnpublishVolumeRequest",
			number:  ForceFieldNumber,
			overlay: &fencev1.NodeUnpublishVolumeForce{},
			field:   "force",
		},
		{
			name:    "force on NodeUnstageVolumeRequest",
			number:  ForceFieldNumber,
			overlay: &fencev1.NodeUnstageVolumeForce{},
			field:   "force",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The overlay message must declare exactly our field, with the
			// number and type the Go helpers use.
			overlay := tc.overlay.ProtoReflect().Descriptor()
			if n := overlay.Fields().Len(); n != 1 {
				t.Fatalf("%s has %d fields, want exactly 1", overlay.FullName(), n)
			}
			f := overlay.Fields().Get(0)
			if f.Number() != tc.number || f.Name() != tc.field || f.Kind() != protoreflect.BoolKind || f.Cardinality() != protoreflect.Optional || f.HasPresence() {
				t.Errorf("%s declares %s %v = %d (presence %v), want proto3 bool %s = %d",
					overlay.FullName(), f.Kind(), f.Name(), f.Number(), f.HasPresence(), tc.field, tc.number)
			}
		})
	}
}

// TestCheckFieldsFreeCatchesACollision feeds the check messages that do use
// the numbers, as a spec release that took them would.
func TestCheckFieldsFreeCatchesACollision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field extensionField
		want  string
	}{
		{"number and name taken", extensionField{&fencev1.ControllerUnpublishVolumeFence{}, FenceFieldNumber, "fence"}, "defines field 4 (fence)"},
		{"number taken by another name", extensionField{&fencev1.NodeUnpublishVolumeForce{}, ForceFieldNumber, "flush"}, "defines field 3 (force)"},
		{"name taken under another number", extensionField{&fencev1.NodeUnstageVolumeForce{}, 9, "force"}, `defines a field named "force" (number 3)`},
		{"free", extensionField{&csi.NodeUnstageVolumeRequest{}, ForceFieldNumber, "force"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFieldsFree([]extensionField{tc.field})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkFieldsFree() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkFieldsFree() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestCapabilityEnumMatchesContract pins the wire values of the capability
// enum that non-Go drivers hard-code.
func TestCapabilityEnumMatchesContract(t *testing.T) {
	want := map[protoreflect.Name]protoreflect.EnumNumber{
		"FENCE_CAPABILITY_UNKNOWN": 0,
		"UNPUBLISH_FENCE":          1,
		"FORCE_UNPUBLISH":          2,
		"LIST_FENCES":              3,
		"LIFT_FENCE":               4,
	}
	values := fencev1.FenceCapability(0).Descriptor().Values()
	if values.Len() != len(want) {
		t.Errorf("FenceCapability has %d values, want %d", values.Len(), len(want))
	}
	for name, number := range want {
		v := values.ByName(name)
		if v == nil {
			t.Errorf("FenceCapability lacks %s", name)
			continue
		}
		if v.Number() != number {
			t.Errorf("%s = %d, want %d", name, v.Number(), number)
		}
	}
}

// TestNoRegistryConflictWithCSI checks that this binary, which links both the
// official csi package and ours, registered both files and that no full name
// or file path of ours is also one of the CSI spec's.
func TestNoRegistryConflictWithCSI(t *testing.T) {
	csiFile := csi.File_csi_proto
	ours := fencev1.File_fence_v1_fenceline_fence_proto

	if ours.Package() == csiFile.Package() || strings.HasPrefix(string(ours.Package()), string(csiFile.Package())+".") {
		t.Errorf("extension package %q is inside the CSI package %q", ours.Package(), csiFile.Package())
	}
	if ours.Path() == csiFile.Path() {
		t.Errorf("extension file path %q equals the CSI file path", ours.Path())
	}
	for _, fd := range []protoreflect.FileDescriptor{csiFile, ours} {
		got, err := protoregistry.GlobalFiles.FindFileByPath(fd.Path())
		if err != nil {
			t.Errorf("global registry lacks %q: %v", fd.Path(), err)
			continue
		}
		if got != fd {
			t.Errorf("global registry holds another descriptor under %q", fd.Path())
		}
	}

	csiNames := map[protoreflect.FullName]bool{}
	walkNames(csiFile, func(n protoreflect.FullName) { csiNames[n] = true })
	count := 0
	walkNames(ours, func(n protoreflect.FullName) {
		count++
		if csiNames[n] {
			t.Errorf("%s is declared by both the CSI spec and the extension", n)
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(n)
		if err != nil {
			t.Errorf("global registry cannot find %s: %v", n, err)
			return
		}
		if d.ParentFile() != ours {
			t.Errorf("global registry resolves %s to %s, not the extension", n, d.ParentFile().Path())
		}
	})
	if count == 0 {
		t.Fatal("the extension file declares nothing; the walk is broken")
	}
}

// walkNames calls fn with the full name of every top-level and nested
// message, enum, enum value and service of fd.
func walkNames(fd protoreflect.FileDescriptor, fn func(protoreflect.FullName)) {
	enums := func(es protoreflect.EnumDescriptors) {
		for i := 0; i < es.Len(); i++ {
			e := es.Get(i)
			fn(e.FullName())
			for j := 0; j < e.Values().Len(); j++ {
				fn(e.Values().Get(j).FullName())
			}
		}
	}
	var messages func(protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			fn(m.FullName())
			enums(m.Enums())
			messages(m.Messages())
		}
	}
	messages(fd.Messages())
	enums(fd.Enums())
	for i := 0; i < fd.Services().Len(); i++ {
		fn(fd.Services().Get(i).FullName())
	}
}
