package faults

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
)

// parseCase is one input of a flag parser and the rule (or error) it gives.
type parseCase struct {
	in      string
	want    Fault
	wantErr bool
}

func runParseCases(t *testing.T, parse func(string) (Fault, error), tests []parseCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parse(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseFault(t *testing.T) {
	runParseCases(t, ParseFault, []parseCase{
		{in: "ControllerUnpublishVolume:Unavailable:3", want: Fault{Method: "ControllerUnpublishVolume", Code: codes.Unavailable, Count: 3}},
		{in: "NodeStageVolume:internal", want: Fault{Method: "NodeStageVolume", Code: codes.Internal}},
		{in: "*:DeadlineExceeded:1", want: Fault{Method: "*", Code: codes.DeadlineExceeded, Count: 1}},
		{in: "ControllerPublishVolume", wantErr: true},
		{in: "ControllerPublishVolume:NoSuchCode", wantErr: true},
		{in: "ControllerPublishVolume:OK", wantErr: true},
		{in: "ControllerPublishVolume:Internal:0", wantErr: true},
		{in: "ControllerPublishVolume:Internal:x", wantErr: true},
		{in: ":Internal", wantErr: true},
	})
}

func TestParseLatency(t *testing.T) {
	runParseCases(t, ParseLatency, []parseCase{
		{in: "ControllerPublishVolume:50ms", want: Fault{Method: "ControllerPublishVolume", Latency: 50 * time.Millisecond}},
		{in: "ControllerPublishVolume:0s", wantErr: true},
		{in: "ControllerPublishVolume:soon", wantErr: true},
		{in: "ControllerPublishVolume", wantErr: true},
	})
}

func TestCountedFaultIsUsedUp(t *testing.T) {
	ctx := context.Background()
	i := New([]Fault{{Method: "ControllerUnpublishVolume", Code: codes.Unavailable, Count: 2}})
	for n := 1; n <= 2; n++ {
		if err := i.Before(ctx, "ControllerUnpublishVolume"); status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d: %v, want Unavailable", n, err)
		}
	}
	if err := i.Before(ctx, "ControllerUnpublishVolume"); err != nil {
		t.Fatalf("call 3: %v, want success", err)
	}
	if rules := i.List(); len(rules) != 0 {
		t.Fatalf("used-up rule still listed: %v", rules)
	}
	if err := i.Before(ctx, "ControllerPublishVolume"); err != nil {
		t.Fatalf("other method failed: %v", err)
	}
}

func TestUncountedFaultAndWildcard(t *testing.T) {
	ctx := context.Background()
	i := New([]Fault{{Method: AnyMethod, Code: codes.Internal}})
	for _, m := range []string{"CreateVolume", "Write", "CreateVolume"} {
		if err := i.Before(ctx, m); status.Code(err) != codes.Internal {
			t.Fatalf("%s: %v, want Internal", m, err)
		}
	}
	i.Set(nil)
	if err := i.Before(ctx, "CreateVolume"); err != nil {
		t.Fatalf("after clearing: %v", err)
	}
}

func TestLatencyStaysAfterCountedErrorIsUsedUp(t *testing.T) {
	i := New([]Fault{{Method: "Write", Code: codes.Aborted, Count: 1, Latency: time.Millisecond}})
	if err := i.Before(context.Background(), "Write"); status.Code(err) != codes.Aborted {
		t.Fatalf("first call: %v", err)
	}
	rules := i.List()
	if len(rules) != 1 || rules[0].Code != codes.OK || rules[0].Latency != time.Millisecond {
		t.Fatalf("rules after the error is used up: %+v", rules)
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	i := New([]Fault{{Method: "Write", Latency: time.Hour}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := i.Before(ctx, "Write"); status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}

func TestFaultString(t *testing.T) {
	f := Fault{Method: "CreateVolume", Code: codes.Unavailable, Count: 3, Latency: 50 * time.Millisecond}
	if got, want := f.String(), "CreateVolume:Unavailable:3,CreateVolume:50ms"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	tests := []Fault{
		{Method: "Write", Code: codes.Aborted, Count: 1},
		{Method: "*", Code: codes.Internal},
		{Method: "ControllerPublishVolume", Latency: 50 * time.Millisecond},
		{Method: "CreateVolume", Code: codes.Unavailable, Count: 2, Latency: time.Second},
	}
	for _, f := range tests {
		t.Run(f.String(), func(t *testing.T) {
			got, err := FromProto(ToProto(f))
			if err != nil || got != f {
				t.Fatalf("round trip = %+v, %v; want %+v", got, err, f)
			}
		})
	}
}

func TestFromProtoRejects(t *testing.T) {
	tests := []struct {
		name string
		in   *mockv1.Fault
	}{
		{name: "no method", in: &mockv1.Fault{Code: "Internal"}},
		{name: "unknown code", in: &mockv1.Fault{Method: "Write", Code: "Oops"}},
		{name: "nothing to inject", in: &mockv1.Fault{Method: "Write"}},
		{name: "negative count", in: &mockv1.Fault{Method: "Write", Code: "Internal", Count: -1}},
		{name: "invalid latency", in: &mockv1.Fault{Method: "Write", Latency: &durationpb.Duration{Seconds: 1, Nanos: -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := FromProto(tc.in); err == nil {
				t.Fatalf("FromProto(%v) succeeded", tc.in)
			}
		})
	}
}
