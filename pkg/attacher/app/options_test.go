package app

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"upstream defaults", func(*Options) {}, ""},
		{"both metrics endpoints", func(o *Options) { o.HTTPEndpoint, o.MetricsAddress = ":8080", ":8081" }, "only one of"},
		{"no workers", func(o *Options) { o.WorkerThreads = 0 }, "--worker-threads"},
		{"leader election timings its elector refuses", func(o *Options) {
			o.LeaderElection, o.LeaderElectionRenewDeadline = true, time.Minute
		}, "--leader-election-lease-duration"},
		// Upstream accepts these: so does the drop-in, with a warning.
		{"zero timeout", func(o *Options) { o.Timeout = 0 }, ""},
		{"retry start above max", func(o *Options) { o.RetryIntervalStart, o.RetryIntervalMax = time.Minute, time.Second }, ""},
		{"zero retry start", func(o *Options) { o.RetryIntervalStart = 0 }, ""},
		{"negative max entries", func(o *Options) { o.MaxEntries = -1 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tc.wantErr)
			}
		})
	}
}

// Values upstream accepts but that are unwise are named in a warning; the
// defaults draw none.
func TestOptionsWarnings(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"upstream defaults", func(*Options) {}, nil},
		{"zero timeout", func(o *Options) { o.Timeout = 0 }, []string{"--timeout=0s"}},
		{"zero retry start", func(o *Options) { o.RetryIntervalStart = 0 }, []string{"--retry-interval-start=0s"}},
		{"max below start", func(o *Options) { o.RetryIntervalStart, o.RetryIntervalMax = time.Minute, time.Second }, []string{"--retry-interval-max=1s is below"}},
		{"negative max entries", func(o *Options) { o.MaxEntries = -1 }, []string{"--max-entries=-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			got := o.Warnings()
			if len(got) != len(tc.want) {
				t.Fatalf("Warnings() = %q, want %d naming %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start with %q", got[i], w)
				}
			}
		})
	}
}

// TestRestConfigSpeaksProtobuf: the attacher's clients use protobuf, as
// upstream's, with JSON accepted as a fallback, and keep the flags' QPS.
func TestRestConfigSpeaksProtobuf(t *testing.T) {
	opts := DefaultOptions()
	opts.RestConfig = &rest.Config{Host: "https://127.0.0.1:6443"}
	opts.KubeAPIQPS, opts.KubeAPIBurst = 7, 9
	c, err := restConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.ContentType != "application/vnd.kubernetes.protobuf" || c.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("content type %q, accept %q; want protobuf with a JSON fallback", c.ContentType, c.AcceptContentTypes)
	}
	if c.QPS != 7 || c.Burst != 9 || c.UserAgent != "fenceline-attacher" {
		t.Errorf("QPS %v burst %d user agent %q", c.QPS, c.Burst, c.UserAgent)
	}
}
