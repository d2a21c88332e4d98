package stormguard

import (
	"fmt"
	"math"
	"time"
)

// Saved is the guard's state as a controller persisted it (the policy's
// status), so that a restart, or another replica taking over, is never
// more permissive than the controller before it. Its times are on the
// clock of the controller that wrote it.
type Saved struct {
	// Tokens were in the bucket at BucketTime.
	Tokens     float64
	BucketTime time.Time
	// StormActive and StormSince are Storm.Active and Storm.Since;
	// LastExit is Storm.LastExit.
	StormActive bool
	StormSince  time.Time
	LastExit    time.Time
	// Written is when the state was saved.
	Written time.Time
}

// Save is the state to persist after a decision at now.
func Save(b Bucket, s Storm, now time.Time) Saved {
	return Saved{Tokens: b.Tokens, BucketTime: b.Last, StormActive: s.Active, StormSince: s.Since, LastExit: s.LastExit, Written: now}
}

// MustSave reports whether a decision's new state must be persisted
// before it takes effect: it took a token, or the storm state changed. A
// refill alone need not be: a restore that misses it only has fewer
// tokens.
func MustSave(d Decision, before Storm) bool {
	return d.Admit || d.NewStorm != before
}

// Restore is the single statement of the state a starting controller
// takes up from saved (nil: nothing was saved), at now on its own clock,
// with the policy's cooldown. It never compares a saved time with now:
// the writer's clock may be another machine's. So it credits nothing for
// the time between the write and the restore:
//
//   - nothing saved: the zero state, a full bucket at first use, as for a
//     policy that never admitted a fence (the state is saved before any
//     admission takes effect, so none was);
//   - a state that cannot be read (times missing or out of order, tokens
//     negative or not a number): an empty bucket and the cooldown in force
//     from now, the safe reading;
//   - otherwise the bucket holds the saved tokens from now (no refill for
//     the time since BucketTime), a storm that was active still is (it ends
//     when a decision sees it clear, and the cooldown runs from then), and
//     a cooldown that had time left at the write has that much left from
//     now.
//
// The string says, for logs, what was restored.
func Restore(saved *Saved, cooldown time.Duration, now time.Time) (Bucket, Storm, string) {
	if saved == nil {
		return Bucket{}, Storm{}, "no saved state: the bucket starts full"
	}
	if why := saved.invalid(); why != "" {
		return Bucket{Tokens: 0, Last: now}, Storm{LastExit: now},
			fmt.Sprintf("saved state unreadable (%s): the bucket starts empty and the cooldown runs from now", why)
	}
	b := Bucket{Tokens: saved.Tokens, Last: now}
	if saved.StormActive {
		return b, Storm{Active: true, Since: now}, fmt.Sprintf("%.3f tokens; a storm was active and still is", saved.Tokens)
	}
	s := Storm{}
	left := time.Duration(0)
	if !saved.LastExit.IsZero() {
		left = max(saved.LastExit.Add(cooldown).Sub(saved.Written), 0)
		// The cooldown ends at now+left: LastExit is placed cooldown
		// before that on this controller's clock.
		s.LastExit = now.Add(left - cooldown)
	}
	return b, s, fmt.Sprintf("%.3f tokens; cooldown left %s", saved.Tokens, left)
}

// invalid says why the saved state cannot be trusted, "" when it can.
func (s *Saved) invalid() string {
	switch {
	case math.IsNaN(s.Tokens) || math.IsInf(s.Tokens, 0) || s.Tokens < 0:
		return fmt.Sprintf("tokens %v", s.Tokens)
	case s.Written.IsZero() || s.BucketTime.IsZero():
		return "no write or bucket time"
	case s.BucketTime.After(s.Written):
		return "bucket time after the write"
	case s.StormActive && (s.StormSince.IsZero() || s.StormSince.After(s.Written)):
		return "active storm without a start before the write"
	case s.LastExit.After(s.Written):
		return "storm end after the write"
	}
	return ""
}
