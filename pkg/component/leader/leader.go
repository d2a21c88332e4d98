// Package leader runs a Fenceline component's work under leader election,
// with one behaviour for both binaries: the work runs only while this
// replica holds the Lease, and the Lease is given up (ReleaseOnCancel)
// whenever the work stops, whether because the process is shutting down
// or because the work failed. A replica whose work failed so never sits on
// the Lease doing nothing: a standby takes over at once instead of after
// the lease duration, and the failed replica exits non-zero and is
// restarted.
package leader

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
)

// WatchdogTimeout is how long past the lease duration a leader may go
// without renewing before its health check fails, so that a wedged leader
// is restarted by its liveness probe. It is the value of the kubernetes-csi
// sidecars and kube-controller-manager.
const WatchdogTimeout = 20 * time.Second

// ErrLost is returned by Run when this replica lost the Lease while its
// work was running (its renewals failed for the renew deadline).
var ErrLost = errors.New("leader election lost")

// Options are the --leader-election* flags.
type Options struct {
	// Enabled is --leader-election.
	Enabled bool
	// Namespace is --leader-election-namespace.
	Namespace string
	// LeaseDuration, RenewDeadline and RetryPeriod are
	// --leader-election-lease-duration, -renew-deadline and -retry-period.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// AddFlags registers the --leader-election* flags on fs with the current
// values of o as defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "leader-election", o.Enabled, "Enable leader election, so that several replicas can run and only one is active.")
	fs.StringVar(&o.Namespace, "leader-election-namespace", o.Namespace, "Namespace of the leader-election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration,
		"How long a non-leader waits after the last renewal it observed before it may take the Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline,
		"How long the leader retries renewing the Lease before it gives up leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod,
		"How long replicas wait between tries to acquire or renew the Lease.")
}

// Validate checks what client-go's leader elector would only reject once
// the component runs, so that a bad value is a usage error. Nothing is
// checked while leader election is off.
func (o Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-election-lease-duration (%v) must be greater than --leader-election-renew-deadline (%v)", o.LeaseDuration, o.RenewDeadline))
	}
	if o.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--leader-election-retry-period must be positive, got %v", o.RetryPeriod))
	} else if float64(o.RenewDeadline) <= leaderelection.JitterFactor*float64(o.RetryPeriod) {
		errs = append(errs, fmt.Errorf("--leader-election-renew-deadline (%v) must be greater than %v times --leader-election-retry-period (%v)",
			o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod))
	}
	return errors.Join(errs...)
}

// Config is one election: the Lease and who competes for it.
type Config struct {
	Options
	// Name is the Lease's name.
	Name string
	// Identity is this replica's holder identity.
	Identity string
	// Labels are set on the Lease when this replica creates it.
	Labels map[string]string
	// Annotations are written with every acquisition and renewal by this
	// replica, so that while it leads the Lease carries them: what a
	// reader should know about the leader (its version).
	Annotations map[string]string
	// Core and Coordination are the clients of the election. They should
	// have a rate limiter of their own, so that a busy, throttled
	// component cannot starve its renewals.
	Core         corev1.CoreV1Interface
	Coordination coordinationv1.CoordinationV1Interface
	// Events, when set, records client-go's Normal LeaderElection Events
	// on the Lease ("<identity> became leader", "<identity> stopped
	// leading"), as the kubernetes-csi sidecars do; nil records none.
	Events record.EventRecorder
}

// Elector runs work under leader election. Create it with New before the
// HTTP server starts, so that the server can serve its Watchdog.
type Elector struct {
	cfg      Config
	watchdog *leaderelection.HealthzAdaptor
}

// New returns an Elector for cfg.
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg, watchdog: leaderelection.NewLeaderHealthzAdaptor(WatchdogTimeout)}, nil
}

// Check implements a health check: it fails while this replica leads but
// has not renewed the Lease for the lease duration plus WatchdogTimeout.
// It passes while leader election is off, or this replica does not lead.
func (e *Elector) Check(r *http.Request) error {
	if e == nil {
		return nil
	}
	return e.watchdog.Check(r)
}
