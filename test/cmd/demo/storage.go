package main

import (
	"context"
	"fmt"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/world"
)

// storage is where the demo's volumes live: the mock driver's memory
// backend (the default: no root, nothing to install), or its tgt backend,
// every volume an iSCSI LUN on a real userspace target whose node
// sessions the fence must end (`make demo-iscsi`).
type storage struct {
	backend string
	method  tgt.FenceMethod
}

func (s storage) real() bool { return s.backend == "tgt" }

// check says clearly what is missing for the backend.
func (s storage) check() error {
	switch s.backend {
	case "", "memory":
		return nil
	case "tgt":
	default:
		return fmt.Errorf("--backend=%q: want memory or tgt", s.backend)
	}
	if err := iscsi.TgtUsable(); err != nil {
		return fmt.Errorf("the demo on a real iSCSI target cannot run: %w (it needs Debian's tgt, apt-get install tgt, and root); without them `make demo` tells the same story on the mock array", err)
	}
	return nil
}

// driver is the world's driver options for the backend.
func (s storage) driver() world.DriverOptions {
	if !s.real() {
		return world.DriverOptions{}
	}
	return world.TgtDriver(s.method, world.DriverOptions{})
}

// judgeBytes reads every LUN written to through a fresh iSCSI session
// and prints the byte checker's verdict; ok is false on any violation. On
// the memory backend there are no bytes to read: ok, nothing printed.
func (s storage) judgeBytes(ctx context.Context, w *world.World) (bool, error) {
	if !s.real() {
		return true, nil
	}
	vs, err := w.CheckBytes(ctx)
	if err != nil {
		return false, err
	}
	ok := true
	for _, v := range vs {
		fmt.Printf("LUN of %s (fence method %s), read through a fresh iSCSI session: %d stamped writes sent, %d acknowledged, %d fences, %d blocks breaking never-two-writers\n",
			v.Volume, s.method, v.Sent, v.Acked, v.Fences, len(v.Violations))
		for i, bad := range v.Violations {
			if i == 3 {
				fmt.Printf("  ... and %d more\n", len(v.Violations)-3)
				break
			}
			fmt.Printf("  %s\n", bad)
		}
		ok = ok && len(v.Violations) == 0
	}
	return ok, nil
}
