package world

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// ControllerLeaseDuration is the leader-election lease duration of the
// controller replicas with Options.ControllerReplicas (renew deadline 3/4
// of it, retry period 500 ms): a killed leader is replaced within seconds.
const ControllerLeaseDuration = 4 * time.Second

// becameLeader is what fenceline-controller logs when it starts leading.
var becameLeader = []byte(`"Became leader"`)

// LeadingController waits until one running controller replica has logged
// that it became leader and returns it. A replica that exited does not
// count, so after killing the leader this finds its successor.
func (w *World) LeadingController(ctx context.Context, timeout time.Duration) (*cluster.Process, error) {
	var leader *cluster.Process
	err := WaitFor(ctx, timeout, "a leading fenceline-controller replica", func(context.Context) (bool, error) {
		for _, p := range w.Controllers {
			if exited, _ := p.Exited(); exited {
				continue
			}
			b, err := os.ReadFile(p.LogPath)
			if err != nil {
				return false, fmt.Errorf("reading %s: %w", p.LogPath, err)
			}
			if bytes.Contains(b, becameLeader) {
				leader = p
				return true, nil
			}
		}
		return false, nil
	})
	return leader, err
}

// StartControllerReplica starts one more fenceline-controller with the
// flags of the first, as a Deployment replaces a killed pod (or an
// operator starts a stopped controller again); it logs to
// fenceline-controller-<i>.log and joins Controllers.
func (w *World) StartControllerReplica(ctx context.Context) (*cluster.Process, error) {
	if w.controllerArgs == nil {
		return nil, fmt.Errorf("no fenceline-controller in this world")
	}
	name := fmt.Sprintf("fenceline-controller-%d", len(w.Controllers))
	p, err := w.startComponentAs(ctx, name, "fenceline-controller", "controller", ControllerServiceAccount, w.controllerArgs)
	if err != nil {
		return nil, err
	}
	w.Controllers = append(w.Controllers, p)
	return p, nil
}

// cachesSynced is what fenceline-controller logs once its informers have
// synced and its controllers run.
var cachesSynced = []byte(`"Caches synced; controllers running"`)

// ControllerRunning waits until the current fenceline-controller has
// synced its caches and runs its controllers: a scenario that times the
// controller's reaction starts its clock after that, not during start-up.
func (w *World) ControllerRunning(ctx context.Context, timeout time.Duration) error {
	if w.Controller == nil {
		return fmt.Errorf("no fenceline-controller in this world")
	}
	p := w.Controller
	return WaitFor(ctx, timeout, "fenceline-controller running", func(context.Context) (bool, error) {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", p.LogPath, err)
		}
		return bytes.Contains(b, cachesSynced), nil
	})
}
