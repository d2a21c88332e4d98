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
	fs.DurationVar(&o.QuarantineDelay, "quarantine-delay", o.QuarantineDelay,
		"How long a node's Ready condition must not have been True before quarantine force-deletes pods of safe-detach drivers on it.")
	fs.DurationVar(&o.QuarantineLiftDelay, "quarantine-lift-delay", o.QuarantineLiftDelay,
		"How long a quarantined node must be Ready before the quarantine may be lifted, so that its kubelet has reported the volumes it still has mounted.")
	fs.DurationVar(&o.ForceEvictionReadyGrace, "force-eviction-ready-grace", o.ForceEvictionReadyGrace,
		"How long a force-eviction taint on a node that is still Ready waits for the node to be noticed dead before it is removed as unneeded, and how recently the node's Lease (kube-node-lease) must have been renewed for its kubelet to count as alive: a NotReady node whose Lease renews within it is not evicted (match kube-controller-manager's --node-monitor-grace-period).")
	g := &o.TaintEvictionGuard
	fs.Float64Var(&g.Rate, "taint-eviction-rate", g.Rate,
		"taint-eviction (feature gate TaintEviction): nodes per second, burst 1, whose pods may start being evicted while they are not Ready (kube-controller-manager's --node-eviction-rate).")
	fs.Float64Var(&g.Zones.PartialDisruptionRate, "taint-eviction-secondary-rate", g.Zones.PartialDisruptionRate,
		"taint-eviction: the rate in a partially disrupted zone larger than --taint-eviction-large-cluster-size; smaller such zones evict nothing (--secondary-node-eviction-rate).")
	fs.Float64Var(&g.Zones.UnhealthyZoneThreshold, "taint-eviction-unhealthy-zone-threshold", g.Zones.UnhealthyZoneThreshold,
		"taint-eviction: the fraction of a zone's nodes not Ready (with more than two) that makes it partially disrupted (--unhealthy-zone-threshold).")
	fs.IntVar(&g.Zones.LargeClusterSize, "taint-eviction-large-cluster-size", g.Zones.LargeClusterSize,
		"taint-eviction: a zone of at most this many nodes evicts nothing while partially disrupted (--large-cluster-size-threshold).")
	fs.StringVar(&g.Zones.ZoneLabel, "taint-eviction-zone-label", g.Zones.ZoneLabel, "taint-eviction: the node label that names a node's zone.")
	fs.BoolVar(&o.DryRun, "dry-run", false, "Decide and log (and record Events), but change nothing.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Workers per controller.")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Informer resync period: a safety net behind the event-driven reactions.")
	return o.Options.AddFlags(fs, "QPS of each client (every controller, the shared informers, leader election and each controller's Events have their own).", "Burst of each client; sized so that a node's worth of force deletions is not throttled.")
}
