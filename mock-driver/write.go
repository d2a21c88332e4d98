package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fenceline.io/fenceline/mock-driver/client"
)

// runWrite is `mock-driver write`: one data-plane write to a volume as the
// node whose socket --endpoint is, for scripts and I/O hooks (fence-sanity's
// --io-command). It fails when the array refuses the write.
func runWrite(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mock-driver write", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "Socket of the node to write as: unix:///path or /path. Required.")
	volume := fs.String("volume", "", "Volume ID. Required.")
	data := fs.String("data", "x", "Bytes to write.")
	timeout := fs.Duration("timeout", 10*time.Second, "Time limit of the write.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *volume == "" || fs.NArg() > 0 {
		return errors.New("usage: mock-driver write --endpoint=<node socket> --volume=<volume ID> [--data=<bytes>]")
	}
	target := *endpoint
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *endpoint, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := client.Write(ctx, conn, *volume, []byte(*data)); err != nil {
		return fmt.Errorf("write to %s through %s: %w", *volume, *endpoint, err)
	}
	return nil
}
