// Command demo starts a local cluster with Fenceline and prints a fenced
// failover of a StatefulSet as a timeline (`make demo`): a node stops
// heartbeating while its pod keeps writing, and with no human step
// node-fencing has it powered off through its BMC, the pod moves with its
// volume fenced, and the node is unfenced once powered on again. With
// --manual it tells the KEP-2268 story instead, where an operator applies
// the out-of-service taint (`make demo-manual`). With --backend=tgt either
// story runs on a real iSCSI target and ends with the byte checker's
// verdict on each LUN (`make demo-iscsi`). With --up it leaves the
// world running in the background for exploration with kubectl (`make
// up`); --down stops it (`make down`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/realkubelet"
)

func main() {
	up := flag.Bool("up", false, "start the world and leave it running in the background")
	down := flag.Bool("down", false, "stop a world started with --up")
	serve := flag.Bool("serve", false, "internal: run the world in the foreground until SIGTERM (used by --up)")
	manual := flag.Bool("manual", false, "tell the manual story: an operator applies the out-of-service taint to a powered-off node")
	replicas := flag.Int("replicas", 2, "pods of the demo StatefulSet")
	verbose := flag.Bool("verbose", false, "print the components' log directory and progress details")
	var store storage
	flag.StringVar(&store.backend, "backend", "memory", "where the volumes live: memory (the mock array) or tgt (iSCSI LUNs on a real userspace target; needs Debian's tgt and root)")
	onReal := flag.Bool("real-kubelet", false, "run the story's node as a real kubelet on a fake container runtime (needs root and make node-tools; falls back to the kubelet stand-in, saying why, when it cannot)")
	method := flag.String("fence-method", string(tgt.MethodACLSessions), "with --backend=tgt, how a fence cuts a node off: acl+sessions, pr, or acl (no fence: watch the byte checker catch it)")
	flag.Parse()
	store.method = tgt.FenceMethod(*method)
	// The demo speaks through its own output; the kubelet stand-ins log to
	// a file next to the components' logs (see world.Launch).
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	err := store.check()
	switch {
	case err != nil:
	case *down:
		err = runDown()
	case *up:
		err = runUp()
	case *serve:
		err = runServe(ctx)
	case *manual:
		err = runManualDemo(ctx, store, realKubelet(*onReal), *replicas, *verbose)
	default:
		err = runDemo(ctx, store, realKubelet(*onReal), *replicas, *verbose)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// realKubelet says whether the story's node can be a real kubelet when
// asked for one, and why not when it cannot.
func realKubelet(asked bool) bool {
	if !asked {
		return false
	}
	if err := realkubelet.Available(); err != nil {
		fmt.Printf("A real kubelet cannot run here (%v): the story's node is the kubelet stand-in.\n", err)
		return false
	}
	return true
}

// step prints a progress line with the time since start.
type stepper struct{ start time.Time }

func (s stepper) printf(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}
