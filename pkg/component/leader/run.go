package leader

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Run runs work while this replica leads and returns when it stops:
//   - ctx ended (a signal): work sees its context end; once it returned,
//     the Lease is released and Run returns work's error (nil for a clean
//     stop), or nil when this replica never led;
//   - work returned on its own: the Lease is released (a standby takes
//     over at once) and Run returns work's error;
//   - the Lease was lost: work's context ends and Run returns ErrLost once
//     work returned.
//
// Run never returns while work still runs, so nothing the work started
// keeps writing after it. A nil Elector runs work without election.
func (e *Elector) Run(ctx context.Context, work func(context.Context) error) error {
	if e == nil {
		return work(ctx)
	}
	logger := klog.FromContext(ctx)
	lock, err := resourcelock.NewWithLabels(resourcelock.LeasesResourceLock, e.cfg.Namespace, e.cfg.Name,
		e.cfg.Core, annotating(e.cfg.Coordination, e.cfg.Annotations), resourcelock.ResourceLockConfig{Identity: e.cfg.Identity, EventRecorder: e.cfg.Events}, e.cfg.Labels)
	if err != nil {
		return fmt.Errorf("create leader election lock: %w", err)
	}
	// Cancelled when work returns: with ReleaseOnCancel the elector then
	// gives the Lease up, whatever made work stop. It is not a child of
	// ctx: the elector stops renewing and releases the moment its context
	// ends, and a signal must not hand the Lease over while work (a
	// power-off under way, a write) still runs. A signal reaches work
	// through work's own context (below); before this replica leads, it
	// stops the election.
	leCtx, leCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer leCancel()
	var (
		workErr error
		// stoppedItself: work returned while it still led and ctx was
		// alive, rather than because its context ended.
		stoppedItself bool
		started       = make(chan struct{})
		done          = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.Name,
		WatchDog:        e.watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				close(started)
				defer close(done)
				logger.Info("Became leader", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
				if ctx.Err() != nil {
					leCancel() // signalled while acquiring: never start
					return
				}
				// work stops when the Lease is lost or ctx ends.
				workCtx, cancelWork := context.WithCancel(leading)
				stop := context.AfterFunc(ctx, cancelWork)
				workErr = work(workCtx)
				stoppedItself = workCtx.Err() == nil
				stop()
				cancelWork()
				leCancel()
			},
			OnStoppedLeading: func() { logger.Info("Stopped leading", "lease", e.cfg.Namespace+"/"+e.cfg.Name) },
			OnNewLeader:      func(id string) { logger.V(2).Info("New leader", "identity", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("configure leader election: %w", err)
	}
	// A signal before this replica leads ends the election; once it
	// leads, work's context carries the signal and leCancel follows work.
	stopElection := context.AfterFunc(ctx, func() {
		select {
		case <-started:
		default:
			leCancel()
		}
	})
	defer stopElection()
	le.Run(leCtx)
	select {
	case <-started:
		<-done
	default:
		return nil // never led; ctx ended while waiting
	}
	switch {
	case workErr != nil:
		return workErr
	case !stoppedItself && ctx.Err() == nil:
		// work's context ended while ctx did not: renewals failed.
		return ErrLost
	}
	return nil
}
