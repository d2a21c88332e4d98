package leader

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	upstream := Options{Enabled: true, Namespace: "ns", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 5 * time.Second}
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"upstream sidecar defaults", func(*Options) {}, ""},
		{"kube-controller-manager defaults", func(o *Options) { o.RetryPeriod = 2 * time.Second }, ""},
		{"off: nothing checked", func(o *Options) { o.Enabled, o.LeaseDuration = false, 0 }, ""},
		{"renew deadline not below lease duration", func(o *Options) { o.RenewDeadline = o.LeaseDuration }, "--leader-election-lease-duration"},
		{"no retry period", func(o *Options) { o.RetryPeriod = 0 }, "--leader-election-retry-period must be positive"},
		{"retry period too close to renew deadline", func(o *Options) { o.RetryPeriod = 9 * time.Second }, "--leader-election-renew-deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := upstream
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
