package stormguard

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestRestore(t *testing.T) {
	// written is the old controller's clock; now is the new one's, an hour
	// ahead of it: nothing may be credited for that hour.
	written := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := written.Add(time.Hour)
	cooldown := 30 * time.Second
	valid := Saved{Tokens: 0.5, BucketTime: written.Add(-time.Second), LastExit: written.Add(-10 * time.Second), Written: written}
	with := func(f func(*Saved)) *Saved { s := valid; f(&s); return &s }
	tests := []struct {
		name       string
		saved      *Saved
		wantBucket Bucket
		wantStorm  Storm
		why        string
	}{
		{"nothing saved: full bucket at first use, no storm", nil, Bucket{}, Storm{}, "starts full"},
		{"tokens kept, no refill for the time since; cooldown keeps its 20 s left", &valid,
			Bucket{Tokens: 0.5, Last: now}, Storm{LastExit: now.Add(-10 * time.Second)}, "cooldown left 20s"},
		{"cooldown over at the write: none left", with(func(s *Saved) { s.LastExit = written.Add(-time.Minute) }),
			Bucket{Tokens: 0.5, Last: now}, Storm{LastExit: now.Add(-cooldown)}, "cooldown left 0s"},
		{"cooldown ended exactly at the write", with(func(s *Saved) { s.LastExit = written.Add(-cooldown) }),
			Bucket{Tokens: 0.5, Last: now}, Storm{LastExit: now.Add(-cooldown)}, "cooldown left 0s"},
		{"no storm ever", with(func(s *Saved) { s.LastExit = time.Time{} }),
			Bucket{Tokens: 0.5, Last: now}, Storm{}, "cooldown left 0s"},
		{"storm active at the write: still active", with(func(s *Saved) { s.StormActive, s.StormSince = true, written.Add(-time.Minute) }),
			Bucket{Tokens: 0.5, Last: now}, Storm{Active: true, Since: now}, "still is"},
		{"empty bucket stays empty", with(func(s *Saved) { s.Tokens = 0 }),
			Bucket{Tokens: 0, Last: now}, Storm{LastExit: now.Add(-10 * time.Second)}, "0.000 tokens"},
		{"negative tokens: unreadable", with(func(s *Saved) { s.Tokens = -1 }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"NaN tokens: unreadable", with(func(s *Saved) { s.Tokens = math.NaN() }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"no write time: unreadable", with(func(s *Saved) { s.Written = time.Time{} }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"no bucket time: unreadable", with(func(s *Saved) { s.BucketTime = time.Time{} }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"bucket time after the write: unreadable", with(func(s *Saved) { s.BucketTime = written.Add(time.Second) }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"storm end after the write: unreadable", with(func(s *Saved) { s.LastExit = written.Add(time.Second) }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
		{"active storm without a start: unreadable", with(func(s *Saved) { s.StormActive = true }),
			Bucket{Last: now}, Storm{LastExit: now}, "unreadable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, s, why := Restore(tc.saved, cooldown, now)
			if b != tc.wantBucket || s != tc.wantStorm || !strings.Contains(why, tc.why) {
				t.Errorf("Restore() = %+v, %+v, %q; want %+v, %+v and %q", b, s, why, tc.wantBucket, tc.wantStorm, tc.why)
			}
		})
	}
}

// TestRestoreNeverMorePermissive: for saved states of a running guard, the
// restored guard, at any moment after the restore, never admits where the
// guard that kept running would have refused on the same view.
func TestRestoreNeverMorePermissive(t *testing.T) {
	pol := input().Policy
	nodes := []NodeHealth{{Name: "a", Zone: "z"}, {Name: "b", Zone: "z", Healthy: true}, {Name: "c", Zone: "z", Healthy: true}, {Name: "d", Zone: "z", Healthy: true}}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tokens := range []float64{0, 0.3, 1, 2} {
		for _, exitAgo := range []time.Duration{-1, 0, 5 * time.Second, 29 * time.Second, time.Minute} {
			running := Bucket{QPS: 0.1, Burst: 2, Tokens: tokens, Last: start}
			storm := Storm{}
			if exitAgo >= 0 {
				storm.LastExit = start.Add(-exitAgo)
			}
			saved := Save(running, storm, start)
			for _, skew := range []time.Duration{-time.Hour, 0, time.Hour} {
				b, s, _ := Restore(&saved, pol.Cooldown, start.Add(skew))
				b.QPS, b.Burst = running.QPS, running.Burst
				for after := time.Duration(0); after <= time.Minute; after += time.Second {
					kept := Admit(Input{Candidate: Candidate{Name: "a", Zone: "z"}, Nodes: nodes, Policy: pol, Bucket: running, Storm: storm, Now: start.Add(after)})
					restored := Admit(Input{Candidate: Candidate{Name: "a", Zone: "z"}, Nodes: nodes, Policy: pol, Bucket: b, Storm: s, Now: start.Add(skew + after)})
					if restored.Admit && !kept.Admit {
						t.Fatalf("tokens %v, storm ended %s before, restored on a clock %s off: admitted %s after the restore (%s) where the running guard refused (%s)",
							tokens, exitAgo, skew, after, restored.Why, kept.Why)
					}
				}
			}
		}
	}
}
