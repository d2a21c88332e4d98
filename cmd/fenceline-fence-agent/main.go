// Command fenceline-fence-agent is the Fenceline component that talks to
// fencing devices (BMCs over Redfish or IPMI) and the only one that reads
// their credentials. It probes every FenceTarget's endpoints with a
// read-only power-status query and writes the result to the target's
// status, so that a broken device shows before the node it guards dies;
// and it carries out the FencingRequests fenceline-controller admitted:
// power off, read back Off, and record each attempt.
package main

import (
	"os"

	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/command"
	"fenceline.io/fenceline/pkg/fenceagent/app"
)

// binary is fenceline-fence-agent on the shared command line; the exit
// codes are package cli's.
var binary = command.Binary[app.Options]{
	Component: app.Component,
	Defaults:  app.DefaultOptions,
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
