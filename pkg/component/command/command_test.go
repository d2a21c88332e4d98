package command

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/cli"
)

// toyOptions are a binary's options: one flag of its own, a gate of its own.
type toyOptions struct {
	Workers int
	Gated   bool
	parsed  bool
}

const toyGate featuregate.Feature = "ToyFeature"

func toy(run func(context.Context, *rest.Config, toyOptions) error) Binary[toyOptions] {
	return Binary[toyOptions]{
		Component: "toy",
		Defaults:  func() toyOptions { return toyOptions{Workers: 2} },
		Gates:     map[featuregate.Feature]featuregate.FeatureSpec{toyGate: {Default: false, PreRelease: featuregate.Alpha}},
		AddFlags: func(fs *flag.FlagSet, o *toyOptions) func() {
			fs.IntVar(&o.Workers, "workers", o.Workers, "Workers.")
			return func() { o.parsed = true }
		},
		Validate: func(o *toyOptions, gate featuregate.FeatureGate) error {
			o.Gated = gate.Enabled(toyGate)
			if o.Workers < 1 {
				return errors.New("--workers must be at least 1")
			}
			return nil
		},
		Run: run,
	}
}

// TestMainExitCodes covers the shared command line: the exit code, what is printed,
// and what reaches the binary's work.
func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"version", []string{"--version"}, cli.ExitOK, "toy ", ""},
		{"help", []string{"--help"}, cli.ExitOK, "", "-workers"},
		{"unknown flag", []string{"--bogus"}, cli.ExitUsage, "", "flag provided but not defined"},
		{"positional argument", []string{"run"}, cli.ExitUsage, "", "unexpected positional arguments"},
		{"own check", []string{"--workers=0"}, cli.ExitUsage, "", "--workers must be at least 1"},
		{"own check before --version", []string{"--workers=0", "--version"}, cli.ExitUsage, "", "--workers"},
		{"unknown gate", []string{"--feature-gates=Nope=true"}, cli.ExitUsage, "", "unrecognized feature gate"},
		{"missing kubeconfig", []string{"--kubeconfig=does-not-exist"}, cli.ExitFailure, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			b := toy(func(context.Context, *rest.Config, toyOptions) error { ran = true; return nil })
			var stdout, stderr bytes.Buffer
			if got := b.Main(append([]string{"toy"}, tc.args...), &stdout, &stderr); got != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stderr %q)", got, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.wantStdout) || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q in them", stdout.String(), stderr.String(), tc.wantStdout, tc.wantStderr)
			}
			if ran {
				t.Error("the work ran, want none: no command line here reaches a cluster")
			}
		})
	}
}

// TestParse: the binary's own flags, its parsed hook and its gate reach
// its options, with the shared flags beside them.
func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("toy", flag.ContinueOnError)
	c, err := toy(nil).Parse(fs, []string{"--workers=5", "--feature-gates=ToyFeature=true", "--kubeconfig=k", "--v=3"})
	if err != nil {
		t.Fatal(err)
	}
	want := toyOptions{Workers: 5, Gated: true, parsed: true}
	if c.Options != want || c.Kubeconfig != "k" || c.ShowVersion {
		t.Errorf("parsed %+v (kubeconfig %q, version %v), want options %+v and kubeconfig k", c.Options, c.Kubeconfig, c.ShowVersion, want)
	}
}
