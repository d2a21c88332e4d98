// Command fenceline-controller is the pod-GC companion of the Fenceline
// attacher: it force-deletes pods stuck on dead nodes (KEP-2268
// out-of-service, safe-detach quarantine, force eviction) so that their
// volumes can be detached, fenced and attached elsewhere.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/version"
)

func main() {
	os.Exit(run(os.Args))
}

// run returns the exit code: 0 after a clean stop, --version or --help, 1
// when the controller failed while running, 2 for a wrong command line.
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
