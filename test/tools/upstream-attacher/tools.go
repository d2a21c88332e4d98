//go:build tools

// Package tools pins the upstream kubernetes-csi external-attacher that the
// benchmarks compare fenceline-attacher against. The binary is built from the
// Go module proxy into the tool cache by `make upstream-attacher`; neither the
// binary nor upstream source is part of this repository.
package tools

import (
	_ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
)
