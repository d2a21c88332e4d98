package bench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/test/cluster"
)

// TestMain sends the harness's own klog output (kubelet stand-ins, world)
// to bench-results/harness.log instead of the terminal, where it would
// bury the result tables. Component logs stay in their run directories.
func TestMain(m *testing.M) {
	flag.Parse()
	closeLog, err := redirectKlog()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	klog.Flush()
	closeLog()
	os.Exit(code)
}

func redirectKlog() (func(), error) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			return nil, fmt.Errorf("configuring klog: %w", err)
		}
	}
	var out io.WriteCloser = nopCloser{io.Discard}
	// Only a benchmark run writes the file: `make test` runs the unit
	// tests of this package and must leave nothing behind.
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" && !testing.Short() {
		if root, err := cluster.RepoRoot(); err == nil {
			dir := filepath.Join(root, "bench-results")
			if err := os.MkdirAll(dir, 0o755); err == nil {
				if f, err := os.Create(filepath.Join(dir, "harness.log")); err == nil {
					out = f
				}
			}
		}
	}
	klog.SetOutput(out)
	return func() { _ = out.Close() }, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
