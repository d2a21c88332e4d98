package app

import (
	"strings"
	"testing"
	"time"
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
		{"zero timeout", func(o *Options) { o.Timeout = 0 }, "--timeout"},
		{"retry start above max", func(o *Options) { o.RetryIntervalStart, o.RetryIntervalMax = time.Minute, time.Second }, "--retry-interval-start"},
		{"negative max entries", func(o *Options) { o.MaxEntries = -1 }, "--max-entries"},
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
