package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"
)

func TestExitCodes(t *testing.T) {
	parseErr := func(args ...string) error {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("n", 1, "")
		return Parse(fs, args)
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, ExitOK},
		{"help", parseErr("--help"), ExitOK},
		{"valid flags", parseErr("--n=2"), ExitOK},
		{"unknown flag", parseErr("--bogus"), ExitUsage},
		{"invalid value", parseErr("--n=x"), ExitUsage},
		{"positional argument", parseErr("--n=2", "extra"), ExitUsage},
		{"wrapped usage error", fmt.Errorf("context: %w", UsageError(errors.New("bad"))), ExitUsage},
		{"runtime failure", errors.New("lost"), ExitFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if got := ExitCodeOf(&out, tc.err); got != tc.want {
				t.Errorf("ExitCodeOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
			if (tc.want != ExitOK) != (out.Len() > 0) {
				t.Errorf("printed %q for exit code %d", out.String(), tc.want)
			}
		})
	}
	if UsageError(nil) != nil {
		t.Error("UsageError(nil) != nil")
	}
}

func TestCommonFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"none", nil, ""},
		{"logging gate and json", []string{"--feature-gates=LoggingBetaOptions=true", "--logging-format=json", "-v=4"}, ""},
		{"client-go gate", []string{"--feature-gates=WatchListClient=false"}, ""},
		{"unknown gate", []string{"--feature-gates=Nope=true"}, "--feature-gates"},
		{"unknown logging format", []string{"--logging-format=xml"}, "logging configuration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCommonFlags(featuregate.NewFeatureGate())
			if err != nil {
				t.Fatal(err)
			}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.AddFlags(fs)
			if err := Parse(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !IsUsageError(err)):
				t.Errorf("Validate() = %v, want a usage error mentioning %q", err, tc.wantErr)
			}
		})
	}
}
