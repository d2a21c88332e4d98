package fence

import (
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// CheckSpec reports whether the CSI spec release linked into this binary
// still leaves the extension's fields free: no field with the number or the
// name of fence (ControllerUnpublishVolumeRequest) or force
// (NodeUnpublishVolumeRequest, NodeUnstageVolumeRequest), no reserved range
// over the number, and no extension ranges. A spec release that takes one of
// them would silently change what IsFenced and the force helpers read, so a
// driver's own tests should call CheckSpec: builds do not run the tests of
// dependencies, and the CSI module is usually upgraded on its own.
func CheckSpec() error {
	return checkFieldsFree([]extensionField{
		{&csi.ControllerUnpublishVolumeRequest{}, FenceFieldNumber, "fence"},
		{&csi.NodeUnpublishVolumeRequest{}, ForceFieldNumber, "force"},
		{&csi.NodeUnstageVolumeRequest{}, ForceFieldNumber, "force"},
	})
}

// extensionField is one field the extension adds to an official message.
type extensionField struct {
	message proto.Message
	number  protowire.Number
	name    protoreflect.Name
}

func checkFieldsFree(fields []extensionField) error {
	var errs []error
	for _, f := range fields {
		d := f.message.ProtoReflect().Descriptor()
		if used := d.Fields().ByNumber(f.number); used != nil {
			errs = append(errs, fmt.Errorf("%s defines field %d (%s): the extension field %s collides with this CSI release", d.FullName(), f.number, used.Name(), f.name))
		}
		if d.ReservedRanges().Has(f.number) {
			errs = append(errs, fmt.Errorf("%s reserves field %d, which the extension uses for %s", d.FullName(), f.number, f.name))
		}
		if used := d.Fields().ByName(f.name); used != nil {
			errs = append(errs, fmt.Errorf("%s defines a field named %q (number %d)", d.FullName(), f.name, used.Number()))
		}
		if d.ExtensionRanges().Len() != 0 {
			errs = append(errs, fmt.Errorf("%s declares extension ranges; the extension's wire format must be revisited", d.FullName()))
		}
	}
	return errors.Join(errs...)
}
