package app

import (
	"fmt"
	"time"

	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	k8smetrics "k8s.io/component-base/metrics"

	"fenceline.io/fenceline/pkg/attacher/heartbeat"
	"fenceline.io/fenceline/pkg/version"
)

// heartbeatConfig prepares the heartbeat Lease that tells fenceline-controller
// that this (leading) attacher serves the driver and whether it can fence.
// Its timing follows leader election, because no flag may be added (the
// command line stays upstream's): by default the Lease is trusted for the
// leader lease duration and renewed three times within it, so evidence of
// a dead attacher runs out about when another attacher could take the
// leader lease. unpublishFence is whether this attacher will fence: the
// driver advertises UNPUBLISH_FENCE and RBAC does not blind the attacher.
func heartbeatConfig(opts Options, config *rest.Config, driverName string, unpublishFence bool, registry k8smetrics.KubeRegistry) (heartbeat.Config, error) {
	// A client of its own, so that a busy attacher cannot starve renewals.
	client, err := coordinationclient.NewForConfig(config)
	if err != nil {
		return heartbeat.Config{}, fmt.Errorf("create heartbeat client: %w", err)
	}
	namespace, identity := electionNamespaceAndIdentity(opts)
	duration := opts.HeartbeatDuration
	if duration <= 0 {
		duration = max(opts.LeaderElectionLeaseDuration, 3*time.Second)
	}
	interval := opts.HeartbeatInterval
	if interval <= 0 {
		interval = duration / 3
	}
	cfg := heartbeat.Config{
		Client:         client,
		Namespace:      namespace,
		Driver:         driverName,
		UnpublishFence: unpublishFence,
		Version:        version.Version,
		Identity:       identity,
		Interval:       interval,
		Duration:       duration,
		Metrics:        heartbeat.NewMetrics(registry),
	}
	return cfg, cfg.Validate()
}
