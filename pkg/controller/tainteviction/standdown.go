package tainteviction

import (
	"fmt"
	"time"
)

// standDownWhy is what a held pod says while kube-controller-manager's
// taint-eviction-controller evidently runs.
const standDownWhy = "kube-controller-manager's taint-eviction-controller is running as well (its TaintManagerEviction Events appear): Fenceline's evicts nothing while it does"

// StandDown is the self-check's view at one moment: until when Fenceline's
// taint eviction stands down because upstream's was seen acting (zero:
// it was not seen within UpstreamWindow).
type StandDown struct {
	Until time.Time
}

// Active reports whether the stand-down holds at now.
func (s StandDown) Active(now time.Time) bool { return now.Before(s.Until) }

// RecheckEviction is the single statement of whether a due eviction may
// be written now. The controller calls it inside the write, on the node
// and pod read fresh from the API server (fresh) and on the self-check as
// it stands at that moment: the sync's decision may predate upstream's
// first Event by the time its evictions take, and an eviction written
// then would be a second one of a pod upstream's controller handles.
//
// It allows the write only when the stand-down does not hold at fresh.Now
// and DecidePod on the fresh data decides the same action (want).
func RecheckEviction(fresh PodInput, want Action, standDown StandDown) (bool, string) {
	if standDown.Active(fresh.Now) {
		return false, fmt.Sprintf("%s; it lasts until %s", standDownWhy, standDown.Until.UTC().Format(time.RFC3339))
	}
	d := DecidePod(fresh)
	if d.Action != want {
		return false, fmt.Sprintf("decided %q instead of %q on fresh data: %s", d.Action, want, d.Why)
	}
	return true, d.Why
}
