// Package faults injects errors and latency into the mock driver's RPCs so
// that tests can play a flaky or slow storage array. Rules come from command
// line flags at start-up and can be replaced at runtime through the mock
// Array service.
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
	// Count is how many calls fail before the rule is used up; zero or less
	// means every call fails until the rules are replaced.
	Count int
	// Latency delays every matching call before it is handled.
	Latency time.Duration
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
// every matching rule (returning early if ctx ends) and then returns the
// error of the first matching error rule that is not used up, or nil.
func (i *Injector) Before(ctx context.Context, method string) error {
	delay, err := i.take(method)
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
	return err
}

func (i *Injector) take(method string) (time.Duration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var delay time.Duration
	var err error
	kept := i.rules[:0]
	for _, r := range i.rules {
		if r.Method != method && r.Method != AnyMethod {
			kept = append(kept, r)
			continue
		}
		delay += r.Latency
		if r.Code != codes.OK && err == nil {
			err = status.Errorf(r.Code, "injected fault for %s", method)
			if r.Count > 0 {
				r.Count--
				if r.Count == 0 {
					if r.Latency > 0 {
						// The error part is used up; the latency stays.
						r.Code = codes.OK
						kept = append(kept, r)
					}
					continue
				}
			}
		}
		kept = append(kept, r)
	}
	i.rules = kept
	return delay, err
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
