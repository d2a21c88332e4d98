// Command fenceline-fence-agent is the Fenceline component that talks to
// fencing devices (BMCs over Redfish or IPMI) and the only one that reads
// their credentials. It probes every FenceTarget's endpoints with a
// read-only power-status query and writes the result to the target's
// status, so that a broken device shows before the node it guards dies;
// and it carries out the FencingRequests fenceline-controller admitted:
// power off, read back Off, and record each attempt.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/fenceagent/app"
	"fenceline.io/fenceline/pkg/version"
)

func main() {
	os.Exit(run(os.Args))
}

// run returns the exit code: 0 after a clean stop, --version or --help, 1
// when the agent failed while running, 2 for a wrong command line.
func run(args []string) int {
	fs := flag.NewFlagSet(app.Component, flag.ContinueOnError)
	cfg, err := parseFlags(fs, args[1:])
	if err != nil {
		return cli.ExitCodeOf(os.Stderr, err)
	}
	if cfg.showVersion {
		fmt.Println(args[0], version.String())
		return cli.ExitOK
	}
	if err := cfg.common.Apply(); err != nil {
		return cli.ExitCodeOf(os.Stderr, err)
	}
	defer klog.Flush()
	return cli.Run(app.Component, version.Version, func(ctx context.Context) error {
		rc, err := kubeclient.Config(kubeclient.Options{Kubeconfig: cfg.kubeconfig})
		if err != nil {
			return err
		}
		return app.Run(ctx, rc, cfg.opts)
	})
}
