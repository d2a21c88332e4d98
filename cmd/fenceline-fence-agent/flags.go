package main

import (
	"flag"

	"fenceline.io/fenceline/pkg/fenceagent/app"
)

// addFlags defines fenceline-fence-agent's own flags on fs, bound to o.
func addFlags(fs *flag.FlagSet, o *app.Options) func() {
	fs.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval, "Time between two read-only power-status probes of a FenceTarget (with up to 10% jitter).")
	fs.DurationVar(&o.ProbeTimeout, "probe-timeout", o.ProbeTimeout, "Bound on one endpoint's power-status query, beyond the FenceClass's action timeout.")
	fs.StringVar(&o.CredentialsNamespace, "credentials-namespace", o.CredentialsNamespace, "The only namespace whose Secrets the agent reads: every credentialsSecretRef must point there.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "FenceTargets probed in parallel.")
	fs.IntVar(&o.FenceWorkers, "fence-workers", o.FenceWorkers, "FencingRequests carried out in parallel.")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Informer resync period.")
	return o.Options.AddFlags(fs, "QPS of each client (the probe, the executor, the informers, leader election and Events have their own).", "Burst of each client.")
}
