package bench

import (
	"testing"
	"time"
)

func TestStopPoint(t *testing.T) {
	for _, reps := range []int{1, 2, 5, 10} {
		var sum time.Duration
		prev := time.Duration(-1)
		for rep := 1; rep <= reps; rep++ {
			p := stopPoint(rep, reps)
			if p <= 0 || p >= prodRenewInterval {
				t.Errorf("stopPoint(%d, %d) = %v, want inside the %v cycle", rep, reps, p, prodRenewInterval)
			}
			if prev >= 0 && p-prev != prodRenewInterval/time.Duration(reps) {
				t.Errorf("stopPoint(%d, %d) = %v is %v after the one before, want %v", rep, reps, p, p-prev, prodRenewInterval/time.Duration(reps))
			}
			prev = p
			sum += p
		}
		if mean := sum / time.Duration(reps); mean != prodRenewInterval/2 {
			t.Errorf("%d repetitions stop at a mean of %v into the cycle, want its middle %v", reps, mean, prodRenewInterval/2)
		}
	}
}
