// Command fenceline-controller is the pod-GC companion of the Fenceline
// attacher: it force-deletes pods stuck on dead nodes (KEP-2268
// out-of-service, safe-detach quarantine, force eviction) so that their
// volumes can be detached, fenced and attached elsewhere.
package main

import (
	"os"

	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/command"
	"fenceline.io/fenceline/pkg/controller/app"
)

// binary is fenceline-controller on the shared command line; the exit
// codes are package cli's.
var binary = command.Binary[app.Options]{
	Component: app.Component,
	Defaults:  app.DefaultOptions,
	Gates:     app.FeatureGates,
	AddFlags:  addFlags,
	Validate: func(o *app.Options, gate featuregate.FeatureGate) error {
		o.FeatureGate = gate
		return o.Validate()
	},
	Run: app.Run,
}

func main() {
	os.Exit(binary.Main(os.Args, os.Stdout, os.Stderr))
}
