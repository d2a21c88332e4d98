package main

import (
	"flag"

	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/fenceagent/app"
)

// config is the parsed command line.
type config struct {
	opts        app.Options
	kubeconfig  string
	showVersion bool
	common      *cli.CommonFlags
}

// parseFlags defines fenceline-fence-agent's flags on fs, parses args and
// validates them. Every error it returns but flag.ErrHelp is a usage error
// (exit code 2), found before the kubeconfig is loaded.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{opts: app.DefaultOptions()}
	o := &c.opts
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty: in-cluster configuration.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval, "Time between two read-only power-status probes of a FenceTarget (with up to 10% jitter).")
	fs.DurationVar(&o.ProbeTimeout, "probe-timeout", o.ProbeTimeout, "Bound on one endpoint's power-status query, beyond the FenceClass's action timeout.")
	fs.StringVar(&o.CredentialsNamespace, "credentials-namespace", o.CredentialsNamespace, "The only namespace whose Secrets the agent reads: every credentialsSecretRef must point there.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "FenceTargets probed in parallel.")
	fs.IntVar(&o.FenceWorkers, "fence-workers", o.FenceWorkers, "FencingRequests carried out in parallel.")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Informer resync period.")
	parsedShared := o.Options.AddFlags(fs, "QPS of each client (the probe, the executor, the informers, leader election and Events have their own).", "Burst of each client.")
	common, err := cli.NewCommonFlags(featuregate.NewFeatureGate())
	if err != nil {
		return nil, err
	}
	c.common = common
	common.AddFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	parsedShared()
	// Everything is checked before --version is honoured, so that
	// `--version` appended to a manifest's arguments proves they are valid.
	if err := common.Validate(); err != nil {
		return nil, err
	}
	o.FeatureGate = common.Gate
	if err := o.Validate(); err != nil {
		return nil, cli.UsageError(err)
	}
	return c, nil
}
