// Command mock-driver is a CSI driver that behaves like a storage array with
// fencing. One process is the array: --endpoint serves Identity and
// Controller (and Node for --node-id), and each --node-endpoint serves
// Identity and Node for one more node. --csi-addons-endpoint serves the
// csi-addons network fence, and --node-address tells the array the client
// address of a node's plugin. `mock-driver write` writes to a
// volume as a node, for scripts. See docs/mock-driver.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/version"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "mock-driver failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "write" {
		return runWrite(context.Background(), os.Args[2:], os.Stderr)
	}
	cfg, showVersion, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	if showVersion {
		fmt.Println(os.Args[0], version.String())
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	klog.InfoS("Shutting down")
	d.Stop()
	klog.Flush()
	return nil
}

// parseFlags turns the command line into a driver configuration.
func parseFlags(args []string) (driver.Config, bool, error) {
	cfg := driver.DefaultConfig()
	cfg.Version = version.Version
	fs := flag.NewFlagSet("mock-driver", flag.ContinueOnError)
	klog.InitFlags(fs)
	// Every RPC is logged at level 2; a mock is there to be watched.
	if err := fs.Set("v", "2"); err != nil {
		return cfg, false, err
	}
	fs.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint serving Identity, Controller (and Node for --node-id): unix:///path or tcp://host:port.")
	fs.StringVar(&cfg.NodeID, "node-id", "", "Node identity of --endpoint; empty serves no Node service there.")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/mock-driver", "Directory for state.json and audit.jsonl.")
	fs.BoolVar(&cfg.MemoryState, "memory-state", false, "Keep the array's state in memory only, not in state.json (a restart forgets every volume): for runs of tens of thousands of volumes, where saving the state on every change would dominate.")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "CSI driver name.")
	fs.BoolVar(&cfg.Fence, "fence", cfg.Fence, "Advertise and honour UNPUBLISH_FENCE.")
	fs.BoolVar(&cfg.FakeFence, "fake-fence", false, "Advertise UNPUBLISH_FENCE but treat fence=true as a plain unpublish (with --fence=false): a lying driver, to test conformance suites.")
	fs.BoolVar(&cfg.ForceUnpublish, "force-unpublish", cfg.ForceUnpublish, "Advertise and honour FORCE_UNPUBLISH.")
	fs.BoolVar(&cfg.ListFences, "list-fences", cfg.ListFences, "Advertise and serve LIST_FENCES on --endpoint: the fences the array holds.")
	fs.BoolVar(&cfg.LiftFence, "lift-fence", cfg.LiftFence, "Advertise and serve LIFT_FENCE on --endpoint (needs --list-fences).")
	fs.Func("unpublish-mode", "What a plain ControllerUnpublishVolume of a volume the node still uses does: strict (refused) or real-array (done; the node keeps write access, as on most real arrays).", func(s string) error {
		m, err := array.ParseUnpublishMode(s)
		cfg.Unpublish = m
		return err
	})
	fs.BoolFunc("unsafe-unpublish", "Deprecated: --unpublish-mode=real-array (false: strict).", func(s string) error {
		on, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want a boolean: %w", err)
		}
		cfg.Unpublish = array.UnpublishStrict
		if on {
			cfg.Unpublish = array.UnpublishRealArray
		}
		return nil
	})
	fs.Int64Var(&cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "Attachment limit per node reported by NodeGetInfo; 0 means none.")
	fs.Int64Var(&cfg.Capacity, "capacity", 0, "Array capacity in bytes; 0 means 1 TiB.")
	fs.BoolVar(&cfg.NoAttach, "no-attach", false, "Serve a driver without an attach step (CSIDriver attachRequired: false): no PUBLISH_UNPUBLISH_VOLUME; nodes stage volumes never published to them.")
	fs.BoolVar(&cfg.MinimalController, "minimal-controller", false, "Advertise only CREATE_DELETE_VOLUME and PUBLISH_UNPUBLISH_VOLUME (no PUBLISH_READONLY, LIST_VOLUMES*, SINGLE_NODE_MULTI_WRITER) and refuse readonly publishes, like a foreign driver advertising the minimum.")
	fs.StringVar(&cfg.Backend, "backend", cfg.Backend, "Where volumes live: memory (bookkeeping only) or tgt (each volume an iSCSI LUN on a tgtd the driver starts; needs Debian's tgt).")
	fs.StringVar(&cfg.FenceMethod, "fence-method", "", "With --backend=tgt, how a fence cuts a node off: acl+sessions (default: revoke the initiator and end its sessions), pr (revoke and preempt the node's SCSI-3 reservation key) or acl (revoke only; no fence, for testing the tests).")
	fs.StringVar(&cfg.HTTPEndpoint, "http-endpoint", "", "host:port serving Prometheus metrics at /metrics; empty disables.")
	nodeEndpoints := map[string]string{}
	fs.Func("node-endpoint", "Serve Identity and Node for another node from the same array: <node-id>=<endpoint>. Repeatable.", func(s string) error {
		node, ep, ok := strings.Cut(s, "=")
		if !ok || node == "" || ep == "" {
			return fmt.Errorf("want <node-id>=<endpoint>, got %q", s)
		}
		if _, dup := nodeEndpoints[node]; dup {
			return fmt.Errorf("node %s given twice", node)
		}
		nodeEndpoints[node] = ep
		return nil
	})
	fs.StringVar(&cfg.CSIAddonsEndpoint, "csi-addons-endpoint", "", "Serve the csi-addons Identity and FenceController (network fencing by CIDR block) on this socket: unix:///path or tcp://host:port; empty serves no csi-addons.")
	nodeAddresses := map[string][]string{}
	var ownAddresses []string
	fs.Func("node-address", "The client address a node plugin reaches the array from, registered at start-up: [<node-id>=]<ip>[,<ip>...] (no node ID: the node of --node-id). The array refuses a node's access while one of its addresses lies in a fenced CIDR block; a node without one is never refused by a network fence. Repeatable.", func(s string) error {
		node, list, named := strings.Cut(s, "=")
		if !named {
			node, list = "", s
		}
		if named && node == "" {
			return fmt.Errorf("want [<node-id>=]<ip>[,<ip>...], got %q", s)
		}
		for a := range strings.SplitSeq(list, ",") {
			if _, err := netip.ParseAddr(a); err != nil {
				return fmt.Errorf("node address %q: %v", a, err)
			}
			if named {
				nodeAddresses[node] = append(nodeAddresses[node], a)
			} else {
				ownAddresses = append(ownAddresses, a)
			}
		}
		return nil
	})
	// addFault appends the rule parse makes of a flag value.
	addFault := func(parse func(string) (faults.Fault, error)) func(string) error {
		return func(s string) error {
			f, err := parse(s)
			if err != nil {
				return err
			}
			cfg.Faults = append(cfg.Faults, f)
			return nil
		}
	}
	fs.Func("fault", "Inject an error: Method:Code[:Count], e.g. ControllerUnpublishVolume:Unavailable:3. Repeatable.", addFault(faults.ParseFault))
	fs.Func("latency", "Inject latency: Method:Duration, e.g. ControllerPublishVolume:50ms. Repeatable.", addFault(faults.ParseLatency))
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if len(nodeEndpoints) > 0 {
		cfg.NodeEndpoints = nodeEndpoints
	}
	if len(ownAddresses) > 0 {
		if cfg.NodeID == "" {
			return cfg, false, errors.New("--node-address without a node ID needs --node-id")
		}
		nodeAddresses[cfg.NodeID] = append(nodeAddresses[cfg.NodeID], ownAddresses...)
	}
	if len(nodeAddresses) > 0 {
		cfg.NodeAddresses = nodeAddresses
	}
	return cfg, *showVersion, nil
}
