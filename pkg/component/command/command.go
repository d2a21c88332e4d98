// Package command is the main of a Fenceline controller binary
// (fenceline-controller, fenceline-fence-agent): the command line they
// share (--kubeconfig, --version, --feature-gates, the logging flags, the
// shared runner flags), its checks, and the exit codes of package cli. A
// binary brings only its own flags, checks and work. fenceline-attacher
// keeps a main of its own: its command line is upstream external-attacher's.
package command

import (
	"context"
	"flag"
	"fmt"
	"io"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/version"
)

// Binary is one controller binary: what it adds to the shared command line
// and what it runs.
type Binary[O any] struct {
	// Component names the binary: its flag set, its logger, its user agents.
	Component string
	// Defaults returns its options before any flag is parsed.
	Defaults func() O
	// Gates are its own feature gates, registered beside those of every
	// Kubernetes component (logging, metrics, client-go); nil for none.
	Gates map[featuregate.Feature]featuregate.FeatureSpec
	// AddFlags defines its own flags on fs, bound to o, and returns what
	// must run once they are parsed (nil for nothing).
	AddFlags func(fs *flag.FlagSet, o *O) (parsed func())
	// Validate checks o once parsed, with gate set from --feature-gates.
	// Its errors are usage errors (exit code 2).
	Validate func(o *O, gate featuregate.FeatureGate) error
	// Run does the binary's work until ctx ends.
	Run func(ctx context.Context, rc *rest.Config, o O) error
}

// Config is a parsed and checked command line.
type Config[O any] struct {
	// Options are the binary's options.
	Options O
	// Kubeconfig is --kubeconfig; empty: in-cluster configuration.
	Kubeconfig string
	// ShowVersion is --version.
	ShowVersion bool
	// Common are --feature-gates and the logging flags.
	Common *cli.CommonFlags
}

// Parse defines every flag of the binary on fs, parses args and checks
// them. Every error it returns but flag.ErrHelp is a usage error, found
// before the kubeconfig is loaded. Everything is checked before --version
// is honoured, so that `--version` appended to a manifest's arguments
// proves they are valid. Parse may run more than once per process: the
// process-wide gates are only replaced by Main.
func (b Binary[O]) Parse(fs *flag.FlagSet, args []string) (*Config[O], error) {
	c := &Config[O]{Options: b.Defaults()}
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty: in-cluster configuration.")
	fs.BoolVar(&c.ShowVersion, "version", false, "Print the version and exit.")
	parsed := b.AddFlags(fs, &c.Options)
	gate := featuregate.NewFeatureGate()
	if b.Gates != nil {
		if err := gate.Add(b.Gates); err != nil {
			return nil, fmt.Errorf("register the feature gates of %s: %w", b.Component, err)
		}
	}
	common, err := cli.NewCommonFlags(gate)
	if err != nil {
		return nil, err
	}
	c.Common = common
	common.AddFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if parsed != nil {
		parsed()
	}
	if err := common.Validate(); err != nil {
		return nil, err
	}
	if err := b.Validate(&c.Options, common.Gate); err != nil {
		return nil, cli.UsageError(err)
	}
	return c, nil
}

// Main runs the binary with args (args[0] is its name) and returns its exit
// code: 0 after a clean stop, --version or --help; 1 when it failed while
// running; 2 for a wrong command line. stdout receives --version, stderr
// the command-line errors.
func (b Binary[O]) Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(b.Component, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := b.Parse(fs, args[1:])
	if err != nil {
		return cli.ExitCodeOf(stderr, err)
	}
	if cfg.ShowVersion {
		_, _ = fmt.Fprintln(stdout, args[0], version.String())
		return cli.ExitOK
	}
	if err := cfg.Common.Apply(); err != nil {
		return cli.ExitCodeOf(stderr, err)
	}
	defer klog.Flush()
	return cli.Run(b.Component, version.Version, func(ctx context.Context) error {
		rc, err := kubeclient.Config(kubeclient.Options{Kubeconfig: cfg.Kubeconfig})
		if err != nil {
			return err
		}
		return b.Run(ctx, rc, cfg.Options)
	})
}
