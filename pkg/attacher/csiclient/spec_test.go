package csiclient

import (
	"testing"

	"fenceline.io/fenceline/pkg/fence"
)

// TestShippedCSISpecLeavesFenceFieldsFree runs the fence module's spec check
// against the CSI spec release this module builds the attacher with, which
// is newer than the fence module's minimum and is what a CSI bump here
// changes.
func TestShippedCSISpecLeavesFenceFieldsFree(t *testing.T) {
	if err := fence.CheckSpec(); err != nil {
		t.Fatal(err)
	}
}
