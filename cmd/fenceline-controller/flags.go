package main

import (
	"flag"
	"strings"

	"fenceline.io/fenceline/pkg/controller/app"
)

// listFlag is a comma-separated list flag.
type listFlag struct{ items *[]string }

func (l listFlag) String() string {
	if l.items == nil {
		return ""
	}
	return strings.Join(*l.items, ",")
}

func (l listFlag) Set(v string) error {
	*l.items = strings.Split(v, ",")
	return nil
}

// addFlags defines fenceline-controller's own flags on fs, bound to o.
func addFlags(fs *flag.FlagSet, o *app.Options) func() {
	fs.Var(listFlag{&o.Controllers}, "controllers", app.ControllersHelp())
	fs.BoolVar(&o.RemoveOutOfServiceTaint, "remove-out-of-service-taint", false,
		"Remove node.kubernetes.io/out-of-service once the node is Ready after a reboot (boot ID changed), no pod is terminating on it and no VolumeAttachment remains.")
	o.AddControllerFlags(fs)
	fs.BoolVar(&o.DryRun, "dry-run", false, "Decide and log (and record Events), but change nothing.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Workers per controller.")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Informer resync period: a safety net behind the event-driven reactions.")
	return o.Options.AddFlags(fs, "QPS of each client (every controller, the shared informers, leader election and each controller's Events have their own).", "Burst of each client; sized so that a node's worth of force deletions is not throttled.")
}
