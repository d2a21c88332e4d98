package driver_test

import (
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"fenceline.io/fenceline/mock-driver/client"
)

// BenchmarkPublishUnpublish measures one ControllerPublishVolume plus one
// ControllerUnpublishVolume over a unix socket, each persisted with fsync:
// the ceiling the mock puts on attach/detach throughput benchmarks.
func BenchmarkPublishUnpublish(b *testing.B) {
	w := newWorld(b, nil)
	vols := make([]string, 16)
	for i := range vols {
		vols[i] = w.createVolume(fmt.Sprintf("pvc-%d", i))
	}
	for i := 0; b.Loop(); i++ {
		id := vols[i%len(vols)]
		if _, err := w.ctrl.ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: rwoCap()}); err != nil {
			b.Fatal(err)
		}
		if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite measures one accepted data-plane write: no state change,
// one audit record.
func BenchmarkWrite(b *testing.B) {
	w := newWorld(b, nil)
	id := w.createVolume("pvc")
	if _, err := w.ctrl.ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: rwoCap()}); err != nil {
		b.Fatal(err)
	}
	data := []byte("0123456789abcdef")
	for b.Loop() {
		if err := client.Write(w.ctx, w.nodes["node-a"], id, data); err != nil {
			b.Fatal(err)
		}
	}
}
