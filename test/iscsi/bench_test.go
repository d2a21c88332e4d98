package iscsi_test

import (
	"fmt"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt"
)

// BenchmarkFence measures a fenced ControllerUnpublishVolume on the tgt
// backend of a node that holds a live session and wrote through it: from
// the call to its OK, which comes only once the cut is confirmed (no
// session of the node listed, or its key no longer registered). Setup
// (attach, login, clean-up) is not timed.
func BenchmarkFence(b *testing.B) {
	for _, m := range []tgt.FenceMethod{tgt.MethodACLSessions, tgt.MethodPR} {
		b.Run(string(m), func(b *testing.B) { benchmarkFence(b, m) })
	}
}

func benchmarkFence(b *testing.B, m tgt.FenceMethod) {
	r := newRig(b, string(m))
	vol := r.volume("pvc-bench")
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		opts := r.attach(vol, "node-a")
		s := r.login(opts)
		if err := r.writer("node-a", uint64(i), s).WriteNext(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := r.unpublish(vol, "node-a", true); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		_ = s.Close()
		r.cleanup(vol, "node-a")
		b.StartTimer()
	}
	st := r.d.Tgt().Stats()
	b.ReportMetric(float64(st.SessionsEnded)/float64(b.N), "sessions-ended/op")
	b.Logf("%d fences, %s on average; sessions ended %d", st.Fences, fmt.Sprint(total/time.Duration(b.N)), st.SessionsEnded)
}
