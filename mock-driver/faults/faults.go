// Package faults injects errors and latency into the mock driver's RPCs so
// that tests can play a flaky or slow storage array. Rules come from command
// line flags at start-up and can be replaced at runtime through the mock
// Array service.
//
// An injected DeadlineExceeded is special: the call is carried out first and
// only its answer is lost, as when a CO's deadline passes while the array
// goes on and finishes the work. A caller that takes DeadlineExceeded for
// "nothing happened" is exactly what such a rule catches.
package faults

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// AnyMethod as a Fault's Method matches every RPC.
const AnyMethod = "*"

// Fault is one injection rule.
type Fault struct {
	// Method is the short RPC name ("ControllerPublishVolume", "Write") or
	// AnyMethod.
	Method string
	// Code is the error to return; codes.OK injects latency only.
	Code codes.Code
	// Count is how many matching calls the rule affects (with its error and
	// its latency) before it is used up and removed; zero or less means
	// every call until the rules are replaced.
	Count int
	// Latency delays every matching call before it is handled.
	Latency time.Duration
}

// FailNext is the rule "the next n calls of method fail with code". With
// codes.DeadlineExceeded the calls are carried out and only their answers
// are lost (see LoseAnswers).
func FailNext(method string, n int, code codes.Code) Fault {
	return Fault{Method: method, Code: code, Count: n}
}

// DelayNext is the rule "the next n calls of method take d longer".
func DelayNext(method string, n int, d time.Duration) Fault {
	return Fault{Method: method, Count: n, Latency: d}
}

// LoseAnswers is the rule "the next n calls of method are carried out by the
// array, but answered DeadlineExceeded": the nasty real case in which the
// CO gave up waiting and cannot tell whether the array did the work.
func LoseAnswers(method string, n int) Fault {
	return FailNext(method, n, codes.DeadlineExceeded)
}

// AppliesFirst reports whether an injected error with this code is
// returned after the call was carried out (a lost answer) rather than
// instead of it. Only DeadlineExceeded is: every other injected code means
// the array did nothing.
func AppliesFirst(code codes.Code) bool { return code == codes.DeadlineExceeded }

// Outcome is what the injector decided for one call.
type Outcome struct {
	// Err is the injected error, or nil.
	Err error
	// Apply: carry the call out first and then answer Err (a lost answer).
	// When false and Err is set, Err answers instead of the handler.
	Apply bool
}

// String renders the rule in the --fault / --latency flag syntax.
func (f Fault) String() string {
	var parts []string
	if f.Code != codes.OK {
		s := f.Method + ":" + f.Code.String()
		if f.Count > 0 {
			s += ":" + strconv.Itoa(f.Count)
		}
		parts = append(parts, s)
	}
	if f.Latency > 0 {
		parts = append(parts, f.Method+":"+f.Latency.String())
	}
	return strings.Join(parts, ",")
}

// Injector applies a set of rules. It is safe for concurrent use.
type Injector struct {
	mu    sync.Mutex
	rules []Fault
}

// New returns an injector with the given rules.
func New(rules []Fault) *Injector {
	i := &Injector{}
	i.Set(rules)
	return i
}

// Set replaces every rule.
func (i *Injector) Set(rules []Fault) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = append([]Fault(nil), rules...)
}

// List returns the rules in force, with Count showing what is left.
func (i *Injector) List() []Fault {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]Fault(nil), i.rules...)
}

// Before is called before an RPC is handled. It waits out the latency of
// every matching rule and then returns the error of the first matching
// error rule that is not used up. If ctx ends during the latency the call
// fails with ctx's error, unless the outcome is a lost answer: the array
// then carries the call out anyway, as a real one does after its client
// gave up.
func (i *Injector) Before(ctx context.Context, method string) Outcome {
	delay, out := i.take(method)
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			if !out.Apply {
				return Outcome{Err: status.FromContextError(ctx.Err()).Err()}
			}
		case <-t.C:
		}
	}
	return out
}

// take counts the call against every matching rule that affects it, drops
// the rules it used up and returns the total latency and the first error.
func (i *Injector) take(method string) (time.Duration, Outcome) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var delay time.Duration
	var out Outcome
	kept := i.rules[:0]
	for _, r := range i.rules {
		if r.Method != method && r.Method != AnyMethod {
			kept = append(kept, r)
			continue
		}
		delay += r.Latency
		// A rule counts a call it delayed or answered; an error rule
		// shadowed by an earlier one keeps its failures for later calls.
		affected := r.Latency > 0
		if r.Code != codes.OK && out.Err == nil {
			out = Outcome{Err: status.Errorf(r.Code, "injected fault for %s", method), Apply: AppliesFirst(r.Code)}
			affected = true
		}
		if affected && r.Count > 0 {
			r.Count--
			if r.Count == 0 {
				continue
			}
		}
		kept = append(kept, r)
	}
	i.rules = kept
	return delay, out
}

// ParseFault parses the --fault flag syntax "Method:Code[:Count]", e.g.
// "ControllerUnpublishVolume:Unavailable:3". Code is a gRPC code name.
func ParseFault(s string) (Fault, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return Fault{}, fmt.Errorf("fault %q: want Method:Code[:Count]", s)
	}
	code, err := ParseCode(parts[1])
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", s, err)
	}
	if code == codes.OK {
		return Fault{}, fmt.Errorf("fault %q: code OK injects nothing", s)
	}
	f := Fault{Method: parts[0], Code: code}
	if len(parts) == 3 {
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 {
			return Fault{}, fmt.Errorf("fault %q: count must be a positive integer", s)
		}
		f.Count = n
	}
	return f, nil
}

// ParseLatency parses the --latency flag syntax "Method:Duration", e.g.
// "ControllerPublishVolume:50ms".
func ParseLatency(s string) (Fault, error) {
	method, d, ok := strings.Cut(s, ":")
	if !ok || method == "" {
		return Fault{}, fmt.Errorf("latency %q: want Method:Duration", s)
	}
	lat, err := time.ParseDuration(d)
	if err != nil || lat <= 0 {
		return Fault{}, fmt.Errorf("latency %q: want a positive duration such as 50ms", s)
	}
	return Fault{Method: method, Latency: lat}, nil
}

// ParseCode turns a gRPC code name such as "Unavailable" into its code.
func ParseCode(name string) (codes.Code, error) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.EqualFold(c.String(), name) {
			return c, nil
		}
	}
	return codes.OK, fmt.Errorf("unknown gRPC code %q", name)
}
