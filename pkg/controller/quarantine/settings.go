package quarantine

import (
	"flag"
	"fmt"
	"time"
)

// Settings are quarantine's own flags.
type Settings struct {
	// Delay is --quarantine-delay: how long a node must be NotReady
	// before quarantine acts.
	Delay time.Duration
	// LiftDelay is --quarantine-lift-delay: how long a quarantined node
	// must be Ready before the quarantine may be lifted.
	LiftDelay time.Duration
}

// DefaultSettings returns the flags' defaults.
func DefaultSettings() *Settings {
	return &Settings{Delay: DefaultDelay, LiftDelay: DefaultLiftDelay}
}

// AddFlags defines the settings' flags on fs.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&s.Delay, "quarantine-delay", s.Delay,
		"How long a node's Ready condition must not have been True before quarantine force-deletes pods of safe-detach drivers on it.")
	fs.DurationVar(&s.LiftDelay, "quarantine-lift-delay", s.LiftDelay,
		"How long a quarantined node must be Ready before the quarantine may be lifted, so that its kubelet has reported the volumes it still has mounted.")
}

// Validate checks the settings.
func (s *Settings) Validate() error {
	if s.Delay < 0 || s.LiftDelay < 0 {
		return fmt.Errorf("--quarantine-delay and --quarantine-lift-delay must not be negative, got %s and %s", s.Delay, s.LiftDelay)
	}
	return nil
}
