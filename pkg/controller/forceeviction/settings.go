package forceeviction

import (
	"flag"
	"fmt"
	"time"
)

// Settings are force-eviction's own flags.
type Settings struct {
	// ReadyGrace is --force-eviction-ready-grace.
	ReadyGrace time.Duration
}

// DefaultSettings returns the flags' defaults.
func DefaultSettings() *Settings { return &Settings{ReadyGrace: DefaultReadyGrace} }

// AddFlags defines the settings' flags on fs.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&s.ReadyGrace, "force-eviction-ready-grace", s.ReadyGrace,
		"How long a force-eviction taint on a node that is still Ready waits for the node to be noticed dead before it is removed as unneeded, and how recently the node's Lease (kube-node-lease) must have been renewed for its kubelet to count as alive: a NotReady node whose Lease renews within it is not evicted (match kube-controller-manager's --node-monitor-grace-period).")
}

// Validate checks the settings.
func (s *Settings) Validate() error {
	if s.ReadyGrace < 0 {
		return fmt.Errorf("--force-eviction-ready-grace must not be negative, got %s", s.ReadyGrace)
	}
	return nil
}
