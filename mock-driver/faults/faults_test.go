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
		if out := i.Before(ctx, "ControllerUnpublishVolume"); status.Code(out.Err) != codes.Unavailable || out.Apply {
			t.Fatalf("call %d: %+v, want Unavailable instead of the call", n, out)
		}
	}
	if err := i.Before(ctx, "ControllerUnpublishVolume").Err; err != nil {
		t.Fatalf("call 3: %v, want success", err)
	}
	if rules := i.List(); len(rules) != 0 {
		t.Fatalf("used-up rule still listed: %v", rules)
	}
	if err := i.Before(ctx, "ControllerPublishVolume").Err; err != nil {
		t.Fatalf("other method failed: %v", err)
	}
}

func TestUncountedFaultAndWildcard(t *testing.T) {
	ctx := context.Background()
	i := New([]Fault{{Method: AnyMethod, Code: codes.Internal}})
	for _, m := range []string{"CreateVolume", "Write", "CreateVolume"} {
		if err := i.Before(ctx, m).Err; status.Code(err) != codes.Internal {
			t.Fatalf("%s: %v, want Internal", m, err)
		}
	}
	i.Set(nil)
	if err := i.Before(ctx, "CreateVolume").Err; err != nil {
		t.Fatalf("after clearing: %v", err)
	}
}

func TestCountBoundsLatencyAndError(t *testing.T) {
	i := New([]Fault{{Method: "Write", Code: codes.Aborted, Count: 1, Latency: time.Millisecond}})
	if err := i.Before(context.Background(), "Write").Err; status.Code(err) != codes.Aborted {
		t.Fatalf("first call: %v", err)
	}
	if rules := i.List(); len(rules) != 0 {
		t.Fatalf("rules after the only counted call: %+v", rules)
	}
}

func TestDelayNext(t *testing.T) {
	i := New([]Fault{DelayNext("ControllerUnpublishVolume", 2, 20*time.Millisecond)})
	for n := 1; n <= 3; n++ {
		start := time.Now()
		out := i.Before(context.Background(), "ControllerUnpublishVolume")
		took := time.Since(start)
		if out.Err != nil {
			t.Fatalf("call %d: %v, want latency only", n, out.Err)
		}
		if delayed := took >= 20*time.Millisecond; delayed != (n <= 2) {
			t.Fatalf("call %d took %v; want delayed=%t", n, took, n <= 2)
		}
	}
}

func TestShadowedErrorRuleKeepsItsCount(t *testing.T) {
	i := New([]Fault{FailNext("Write", 1, codes.Unavailable), FailNext("Write", 1, codes.Internal)})
	for _, want := range []codes.Code{codes.Unavailable, codes.Internal, codes.OK} {
		if got := status.Code(i.Before(context.Background(), "Write").Err); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
}

func TestLoseAnswersAppliesTheCall(t *testing.T) {
	tests := []struct {
		rule      Fault
		wantCode  codes.Code
		wantApply bool
	}{
		{rule: LoseAnswers("ControllerUnpublishVolume", 1), wantCode: codes.DeadlineExceeded, wantApply: true},
		{rule: FailNext("ControllerUnpublishVolume", 1, codes.DeadlineExceeded), wantCode: codes.DeadlineExceeded, wantApply: true},
		{rule: FailNext("ControllerUnpublishVolume", 1, codes.Unavailable), wantCode: codes.Unavailable, wantApply: false},
	}
	for _, tc := range tests {
		t.Run(tc.rule.String(), func(t *testing.T) {
			out := New([]Fault{tc.rule}).Before(context.Background(), "ControllerUnpublishVolume")
			if status.Code(out.Err) != tc.wantCode || out.Apply != tc.wantApply {
				t.Fatalf("outcome %+v, want code %s, apply %t", out, tc.wantCode, tc.wantApply)
			}
		})
	}
}

// TestLostAnswerOutlivesItsClient: the client's deadline passes during the
// latency, and the array still carries the call out.
func TestLostAnswerOutlivesItsClient(t *testing.T) {
	rule := LoseAnswers("ControllerUnpublishVolume", 1)
	rule.Latency = 30 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	out := New([]Fault{rule}).Before(ctx, "ControllerUnpublishVolume")
	if !out.Apply || status.Code(out.Err) != codes.DeadlineExceeded {
		t.Fatalf("outcome %+v, want the call carried out and DeadlineExceeded", out)
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
