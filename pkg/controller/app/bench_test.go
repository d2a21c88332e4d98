package app_test

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/names"
)

// BenchmarkOutOfServiceReaction measures the time from the moment the
// out-of-service taint is written to the moment the last stuck pod of that
// node is deleted, on a real kube-apiserver, with background nodes and pods
// that must not slow the reaction down (indexed lookups, no full List).
// Reported as ms/reaction (last pod) and ms/first-pod, for 1, 10 and 50
// stuck pods on the node.
//
//	go test -run '^$' -bench OutOfServiceReaction -benchtime 5x ./pkg/controller/app/
func BenchmarkOutOfServiceReaction(b *testing.B) {
	const (
		backgroundNodes   = 20
		podsPerBackground = 25
	)
	o := testOptions(podgc.Name)
	o.Workers = 4
	e := startEnv(b, o)
	for i := range backgroundNodes {
		node := fmt.Sprintf("bg-%d", i)
		e.createNode(node, true)
		for j := range podsPerBackground {
			e.createPod(fmt.Sprintf("%s-%d", node, j), node)
		}
	}
	for _, stuckPerNode := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("stuck-pods=%d", stuckPerNode), func(b *testing.B) {
			reactions(b, e, stuckPerNode)
		})
	}
}

// reactions runs b.N out-of-service reactions of stuckPerNode pods each.
func reactions(b *testing.B, e *env, stuckPerNode int) {
	var total, first time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		node := fmt.Sprintf("oos-bench-%d-%d", stuckPerNode, i)
		e.createNode(node, false)
		for j := range stuckPerNode {
			e.createStuckPod(fmt.Sprintf("%s-%d", node, j), node)
		}
		w, err := e.admin.CoreV1().Pods(ns).Watch(e.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		e.addTaint(node, names.OutOfServiceTaint, v1.TaintEffectNoExecute)
		deleted := 0
		timeout := time.After(waitTimeout)
		for deleted < stuckPerNode {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("watch closed")
				}
				if ev.Type == watch.Deleted {
					if deleted == 0 {
						first += time.Since(t0)
					}
					deleted++
				}
			case <-timeout:
				b.Fatalf("only %d of %d pods deleted within %s", deleted, stuckPerNode, waitTimeout)
			}
		}
		total += time.Since(t0)
		w.Stop()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/reaction")
	b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "ms/first-pod")
}
