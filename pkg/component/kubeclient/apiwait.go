package kubeclient

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// APIWait times the reachability check of WaitForAPIServer.
type APIWait struct {
	// Try bounds one request, so that an API server that drops packets
	// cannot hold the check (or a shutdown) for a TCP timeout.
	Try time.Duration
	// Backoff spaces the retries.
	Backoff wait.Backoff
}

// DefaultAPIWait is the timing both binaries use: a first retry after half
// a second, then doubling up to 30 s.
var DefaultAPIWait = APIWait{
	Try:     5 * time.Second,
	Backoff: wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second},
}

// WaitForAPIServer returns nil once the API server answers GET /version. Every
// failure is logged at default verbosity with the time of the next try:
// client-go's informers retry an unreachable API server silently (at -v=2),
// so without this check a wrong kubeconfig or a broken network would look
// like a hung component. No informer runs before it returns, so a signal stops
// the process at once; it returns ctx's error when ctx ends first.
func WaitForAPIServer(ctx context.Context, rc rest.Interface, w APIWait) error {
	logger := klog.FromContext(ctx)
	backoff := w.Backoff
	for attempt := 1; ; attempt++ {
		tryCtx, cancel := context.WithTimeout(ctx, w.Try)
		err := rc.Get().AbsPath("/version").Do(tryCtx).Error()
		cancel()
		if err == nil {
			if attempt > 1 {
				logger.Info("Kubernetes API server reachable again", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		delay := backoff.Step()
		logger.Error(err, "Kubernetes API server unreachable; retrying", "attempt", attempt, "retryIn", delay.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}
