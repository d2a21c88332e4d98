package stormguard

import (
	"math"
	"time"
)

// Bucket is a token bucket kept by the caller between calls: Admit takes
// it in and returns the new one (Decision.NewBucket), so the rate limit
// stays a pure function of its inputs.
type Bucket struct {
	// QPS is the refill rate in fences per second, Burst the capacity.
	QPS   float64
	Burst int
	// Tokens is the content at Last. A zero Last means no state yet (a
	// fresh controller): the bucket starts full, as client-go's and the
	// node lifecycle controller's token buckets do; the concurrency limit,
	// not the bucket, bounds a restart.
	Tokens float64
	Last   time.Time
}

// refill returns the bucket at now with the refill rate qps and capacity
// burst. A clock that went backwards adds nothing and keeps Last.
func (b Bucket) refill(now time.Time, qps float64, burst int) Bucket {
	if b.Last.IsZero() {
		b.Tokens, b.Last = float64(burst), now
		return b
	}
	if elapsed := now.Sub(b.Last); elapsed > 0 {
		b.Tokens += elapsed.Seconds() * qps
		b.Last = now
	}
	b.Tokens = min(b.Tokens, float64(burst))
	return b
}

// take refills the bucket at now and takes one token if there is one. It
// returns the new bucket, whether a token was taken and, if not, when the
// next will be there (zero when qps is zero: never by refill).
func (b Bucket) take(now time.Time, qps float64, burst int) (Bucket, bool, time.Duration) {
	b = b.refill(now, qps, burst)
	if b.Tokens >= 1 {
		b.Tokens--
		return b, true, 0
	}
	if qps <= 0 {
		return b, false, 0
	}
	wait := math.Ceil((1 - b.Tokens) / qps * float64(time.Second))
	return b, false, time.Duration(wait)
}
