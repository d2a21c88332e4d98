package app

import (
	"fmt"
	"slices"
	"strings"

	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/outofservice"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
)

// KnownControllers lists every controller name --controllers accepts.
var KnownControllers = []string{podgc.Name, quarantine.Name, forceeviction.Name, outofservice.Name}

// DisabledByDefault lists the controllers that "*" does not enable: removing
// the out-of-service taint automatically is opt-in.
var DisabledByDefault = []string{outofservice.Name}

// EnabledControllers resolves a --controllers list the way
// kube-controller-manager does: "*" enables every controller that is on by
// default, "name" enables one, "-name" disables one. The last mention of a
// name wins over "*".
func EnabledControllers(spec []string) (map[string]bool, error) {
	enabled := map[string]bool{}
	star := false
	explicit := map[string]bool{}
	for _, raw := range spec {
		item := strings.TrimSpace(raw)
		switch {
		case item == "":
			continue
		case item == "*":
			star = true
			continue
		}
		name, off := strings.CutPrefix(item, "-")
		if !slices.Contains(KnownControllers, name) {
			return nil, fmt.Errorf("unknown controller %q in --controllers (known: %s)", name, strings.Join(KnownControllers, ", "))
		}
		explicit[name] = !off
	}
	for _, name := range KnownControllers {
		on, ok := explicit[name]
		if !ok {
			on = star && !slices.Contains(DisabledByDefault, name)
		}
		if on {
			enabled[name] = true
		}
	}
	return enabled, nil
}
