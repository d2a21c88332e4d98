// Command kubectl-fenceline is the kubectl plugin of Fenceline: on PATH, it
// runs as `kubectl fenceline status|fence|unfence|explain`. See
// docs/kubectl-plugin.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"fenceline.io/fenceline/pkg/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := &kubectlplugin.Options{
		Flags:   genericclioptions.NewConfigFlags(true),
		Streams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
	}
	if err := kubectlplugin.NewCommand(o).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
