package controller

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

func TestChooseLane(t *testing.T) {
	tests := []struct {
		name string
		in   laneInput
		want lane
	}{
		{"an attach", laneInput{}, laneAttach},
		{"a detach from a healthy node", laneInput{Detach: true}, laneDetach},
		{"a detach from a cut-off node", laneInput{Detach: true, NodeCutOff: true}, laneFailover},
		{"a detach recorded as fenced", laneInput{Detach: true, FenceKnown: true}, laneFailover},
		{"the attach that replaces a fenced detach", laneInput{VolumeMoving: true}, laneFailover},
		{"an attachment whose record is written ahead of its detach", laneInput{RecordDue: true}, laneFailover},
		// A volume that moved lately and is detached again from a healthy
		// node is routine work: only the attach side of a move is failover.
		{"a plain detach of a volume that moved", laneInput{Detach: true, VolumeMoving: true}, laneDetach},
		// Neither a cut-off node nor a record is read on the attach side:
		// nothing to detach, nothing to hurry.
		{"an attach on a cut-off node", laneInput{NodeCutOff: true, FenceKnown: true}, laneAttach},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chooseLane(tt.in); got != tt.want {
				t.Errorf("chooseLane(%+v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// lanesOf drains the lanes, as workers would, until name was queued, and
// returns every lane it was queued in meanwhile. Other keys (late events of
// earlier writes) may come and go.
func (e *env) lanesOf(name string) []lane {
	e.t.Helper()
	var in []lane
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		for l, loop := range e.ctrl.vaQueue.loops {
			if slices.Contains(loop.Drain(), name) && !slices.Contains(in, lane(l)) {
				in = append(in, lane(l))
			}
		}
		return len(in) > 0, nil
	})
	if err != nil {
		e.t.Fatalf("%s was never queued", name)
	}
	return in
}

// wantLane fails unless name is queued in want, and in none of notIn.
// The late events of an attach's own writes may queue it in the attach
// lane at any time, so tests of the other lanes leave that one out.
func (e *env) wantLane(name string, want lane, notIn ...lane) {
	e.t.Helper()
	got := e.lanesOf(name)
	if !slices.Contains(got, want) {
		got = append(got, e.lanesOf(name)...)
	}
	if !slices.Contains(got, want) || slices.ContainsFunc(got, func(l lane) bool { return slices.Contains(notIn, l) }) {
		e.t.Fatalf("%s was queued in %v, want %s and none of %v", name, got, want, notIn)
	}
}

// A failover, end to end through the handlers: the detach from an
// out-of-service node is queued in the failover lane, as is the attach of
// the same volume to another node after the fenced detach; a routine
// detach and an unrelated attach are not.
func TestFailoverWorkTakesTheFailoverLane(t *testing.T) {
	e := newEnv(t, envOptions{otherNodes: []string{"node-2"}}, csiNodeFor(testNode, testNode), csiNodeFor("node-2", "node-2"),
		testobj.Node(testNode), testobj.Node("node-2"))
	volumeID := e.attached()
	e.drain()

	e.updateNode(testNode, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	e.waitNodeCached(testNode)
	e.markDeleting("va-1")
	e.wantLane("va-1", laneFailover, laneDetach)
	e.waitCached("va-1")
	if err := e.ctrl.syncVA(context.WithValue(e.ctx, laneKey{}, laneFailover), "va-1"); err != nil {
		t.Fatalf("fenced detach: %v", err)
	}
	if !e.ctrl.moves.recent("pv-1", time.Now()) {
		t.Fatal("the fenced detach did not record that pv-1 is moving")
	}

	e.create(vaFor("va-2", "pv-1", "node-2"))
	e.wantLane("va-2", laneFailover, laneAttach)
	other := e.createVolume("vol-2")
	e.create(pvFor("pv-2", other), vaFor("va-3", "pv-2", "node-2"))
	e.wantLane("va-3", laneAttach, laneFailover)
	if volumeID == other {
		t.Fatal("two volumes share an ID")
	}
}

// A controller's fence intent that arrives on a detach already waiting in
// the detach lane moves it to the failover lane; a routine detach stays
// where it is.
func TestIntentMovesAWaitingDetach(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode))
	e.attached()
	e.drain()
	e.markDeleting("va-1")
	e.wantLane("va-1", laneDetach, laneFailover)
	// The fake API sets no resourceVersions; an update that changes only
	// the fence annotations must look like one (see onlyErrorsChanged).
	e.updateVA("va-1", func(va *storagev1.VolumeAttachment) {
		withIntent(cutoff.ReasonOutOfService)(va)
		va.ResourceVersion = "2"
	})
	e.wantLane("va-1", laneFailover, laneDetach)
}

// Failover syncs write through the failover client, the others through
// the attacher's.
func TestFailoverClient(t *testing.T) {
	routine, failover := fake.NewClientset(), fake.NewClientset()
	c := &Controller{cfg: Config{Client: routine, FailoverClient: failover}}
	for l := range laneCount {
		want := any(routine)
		if l == laneFailover {
			want = failover
		}
		if got := c.client(context.WithValue(context.Background(), laneKey{}, l)); got != want {
			t.Errorf("lane %s syncs through the wrong client", l)
		}
	}
	if c.client(context.Background()) != any(routine) {
		t.Error("a sync outside any lane (the reconciler, tests) does not use the attacher's client")
	}
}

// A key queued in two lanes is never synced by two workers at once;
// different keys are.
func TestKeyLocks(t *testing.T) {
	var locks keyLocks
	var running, overlap atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			defer locks.lock("va-1")()
			if running.Add(1) > 1 {
				overlap.Add(1)
			}
			runtime.Gosched() // holds the lock while the others run and try
			running.Add(-1)
		})
	}
	wg.Wait()
	if overlap.Load() != 0 {
		t.Errorf("one key was held by two workers at once %d times", overlap.Load())
	}
	unlock := locks.lock("va-1")
	done := make(chan struct{})
	go func() { defer locks.lock("va-2")(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a second key waited for the first key's lock")
	}
	unlock()
	if len(locks.held) != 0 {
		t.Errorf("locks of keys no one holds are kept: %v", locks.held)
	}
}

func TestVolumeMoves(t *testing.T) {
	var m volumeMoves
	now := time.Now()
	m.moved("pv-1", now)
	if !m.recent("pv-1", now.Add(movedFor-time.Second)) || m.recent("pv-2", now) {
		t.Fatal("a move is not remembered for movedFor, or another volume counts as moved")
	}
	if m.recent("pv-1", now.Add(movedFor)) {
		t.Error("a move older than movedFor still counts")
	}
	m.moved("pv-2", now.Add(movedFor))
	if _, kept := m.at["pv-1"]; kept {
		t.Error("an old move is never forgotten")
	}
}
