// Command fenceline-attacher is a drop-in replacement for the kubernetes-csi
// external-attacher sidecar: same flags, finalizers, annotations and leader
// lease, plus fenced detaches from nodes known to be down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/version"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if cfg.showVersion {
		fmt.Println(os.Args[0], version.Version)
		return 0
	}
	if err := cfg.applyLogging(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("fenceline-attacher")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.Version)
	if cfg.opts.MetricsAddress != "" {
		logger.Info("--metrics-address is deprecated; use --http-endpoint")
	}
	cfg.opts.ExitOnConnectionLoss = true
	if err := app.Run(ctx, cfg.opts); err != nil {
		logger.Error(err, "fenceline-attacher failed")
		return 1
	}
	return 0
}
