// Command fenceline-attacher is a drop-in replacement for the kubernetes-csi
// external-attacher sidecar: same flags, finalizers, annotations and leader
// lease, plus fenced detaches from nodes known to be down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/version"
)

const component = "fenceline-attacher"

func main() {
	os.Exit(run(os.Args))
}

// run returns the exit code: 0 after a clean stop or --version, 1 when the
// attacher failed while running, 2 for a wrong command line.
func run(args []string) int {
	flag.CommandLine.Init(component, flag.ContinueOnError)
	cfg, err := parseFlags(flag.CommandLine, args[1:])
	if err != nil {
		return cli.ExitCodeOf(os.Stderr, err)
	}
	if cfg.showVersion {
		fmt.Println(args[0], version.String())
		return cli.ExitOK
	}
	if err := cfg.applyLogging(); err != nil {
		return cli.ExitCodeOf(os.Stderr, err)
	}
	defer klog.Flush()
	for _, w := range cfg.warnings {
		klog.Background().WithName(component).Info("Warning: "+w, "upstreamAccepts", true)
	}
	return cli.Run(component, version.Version, func(ctx context.Context) error {
		if cfg.opts.MetricsAddress != "" {
			klog.FromContext(ctx).Info("--metrics-address is deprecated; use --http-endpoint")
		}
		cfg.opts.ExitOnConnectionLoss = true
		return app.Run(ctx, cfg.opts)
	})
}
