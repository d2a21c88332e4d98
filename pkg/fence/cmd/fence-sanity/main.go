// Command fence-sanity runs the fence-sanity conformance suite (package
// fenceline.io/fenceline/pkg/fence/sanity) against a running CSI driver that
// advertises UNPUBLISH_FENCE, FORCE_UNPUBLISH, LIST_FENCES or LIFT_FENCE.
//
//	fence-sanity --controller-endpoint=unix:///run/csi/controller.sock \
//	    --node-endpoint=node-1=unix:///run/csi/node.sock \
//	    --io-command='my-driver-write --volume={volume} --node={node}'
//
// It prints one line per case (PASS, FAIL or SKIP, the case name and the
// reason) and exits 0 when no case failed, 1 when one did, and 2 for a
// command line it cannot use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"fenceline.io/fenceline/pkg/fence/sanity"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command without its process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, verbose, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fence-sanity:", err)
		return 2
	}
	results, err := sanity.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "fence-sanity:", err)
		return 2
	}
	counts := map[sanity.Status]int{}
	for _, r := range results {
		counts[r.Status]++
		line := fmt.Sprintf("%s %s", r.Status, r.Name)
		if r.Reason != "" {
			line += ": " + r.Reason
		}
		fmt.Fprintln(stdout, line)
		if verbose || r.Status == sanity.Fail {
			for _, l := range r.Log {
				fmt.Fprintln(stdout, "    "+l)
			}
		}
	}
	fmt.Fprintf(stdout, "fence-sanity summary: pass=%d fail=%d skip=%d\n", counts[sanity.Pass], counts[sanity.Fail], counts[sanity.Skip])
	if counts[sanity.Fail] > 0 {
		return 1
	}
	return 0
}

// parseFlags turns the command line into a suite configuration.
func parseFlags(args []string, stderr io.Writer) (sanity.Config, bool, error) {
	var cfg sanity.Config
	fs := flag.NewFlagSet("fence-sanity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.ControllerEndpoint, "controller-endpoint", "", "Endpoint serving Identity, Controller and FenceCapabilities: unix:///path, /path or tcp://host:port. Required.")
	fs.Func("node-endpoint", "Node plugin: [<node-id>=]<endpoint>, repeatable; the first is the node that is fenced. None: the controller endpoint also serves Node.", func(s string) error {
		n := sanity.Node{Endpoint: s}
		if id, ep, ok := strings.Cut(s, "="); ok && !strings.Contains(id, "/") {
			n = sanity.Node{ID: id, Endpoint: ep}
		}
		if n.Endpoint == "" {
			return fmt.Errorf("empty endpoint in %q", s)
		}
		if _, err := sanity.Target(n.Endpoint); err != nil {
			return err
		}
		cfg.Nodes = append(cfg.Nodes, n)
		return nil
	})
	fs.StringVar(&cfg.VolumeID, "volume-id", "", "Existing volume to use in every case. Empty: each case creates and deletes its own.")
	fs.StringVar(&cfg.VolumeNamePrefix, "volume-name-prefix", "fence-sanity", "Prefix of the names of created volumes.")
	fs.Int64Var(&cfg.CapacityBytes, "capacity", 1<<30, "Size in bytes of created volumes.")
	params := map[string]string{}
	fs.Func("parameter", "CreateVolume parameter key=value, repeatable.", keyValue(params))
	volCtx := map[string]string{}
	fs.Func("volume-context", "Volume context key=value for --volume-id, repeatable.", keyValue(volCtx))
	block := fs.Bool("block", false, "Use a block volume instead of a mount volume.")
	fsType := fs.String("fs-type", "", "File system type of the mount volume.")
	fs.StringVar(&cfg.StagingDir, "staging-dir", "", "Directory for staging paths (default: a temporary directory).")
	fs.StringVar(&cfg.TargetDir, "target-dir", "", "Directory for target paths (default: a temporary directory).")
	ioCommand := fs.String("io-command", "", "Command that writes to a volume as a node, run with sh -c: {volume} and {node} are replaced by the shell-quoted IDs (also in $FENCE_SANITY_VOLUME_ID, $FENCE_SANITY_NODE_ID). Exit 0: the write succeeded; non-zero: it failed.")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "Time limit of each case.")
	runPattern := fs.String("run", "", "Run only the cases whose name matches this regular expression.")
	verbose := fs.Bool("v", false, "Print each case's log, not only for failed cases.")
	secretsPath := fs.String("secrets", "", "YAML file of the CSI secrets of each call, in csi-sanity's format (CreateVolumeSecret, ControllerPublishVolumeSecret, ControllerUnpublishVolumeSecret, NodeStageVolumeSecret, ..., and ListFencesSecret, LiftFenceSecret for the extension's own calls); the same file serves both suites.")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.ControllerEndpoint == "" {
		return cfg, false, errors.New("--controller-endpoint is required")
	}
	if _, err := sanity.Target(cfg.ControllerEndpoint); err != nil {
		return cfg, false, err
	}
	if *runPattern != "" {
		re, err := regexp.Compile(*runPattern)
		if err != nil {
			return cfg, false, fmt.Errorf("--run: %w", err)
		}
		cfg.Run = re
	}
	if len(params) > 0 {
		cfg.Parameters = params
	}
	if len(volCtx) > 0 {
		cfg.VolumeContext = volCtx
	}
	cfg.VolumeCapability = volumeCapability(*block, *fsType)
	if *secretsPath != "" {
		s, err := loadSecrets(*secretsPath)
		if err != nil {
			return cfg, false, err
		}
		cfg.Secrets = s
	}
	if *ioCommand != "" {
		cfg.IO = CommandHook(*ioCommand)
	}
	return cfg, *verbose, cfg.Validate()
}

// keyValue parses key=value flags into m.
func keyValue(m map[string]string) func(string) error {
	return func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want key=value, got %q", s)
		}
		m[k] = v
		return nil
	}
}

// volumeCapability is a SINGLE_NODE_WRITER block or mount capability.
func volumeCapability(block bool, fsType string) *csi.VolumeCapability {
	c := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}}
	}
	return c
}

// CommandHook is an I/O hook that runs a shell command template.
type CommandHook string

// Write runs the command with {volume} and {node} replaced; a non-zero exit
// is a failed write, reported with the command's output.
func (h CommandHook) Write(ctx context.Context, volumeID, nodeID string) error {
	cmdline := strings.NewReplacer("{volume}", shellQuote(volumeID), "{node}", shellQuote(nodeID)).Replace(string(h))
	cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
	cmd.Env = append(os.Environ(), "FENCE_SANITY_VOLUME_ID="+volumeID, "FENCE_SANITY_NODE_ID="+nodeID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("I/O command %q: %w: %s", cmdline, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
