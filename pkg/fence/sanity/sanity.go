// Package sanity is fence-sanity: a conformance suite for CSI drivers that
// advertise UNPUBLISH_FENCE, FORCE_UNPUBLISH, LIST_FENCES or LIFT_FENCE
// through the Fenceline fence extension (package
// fenceline.io/fenceline/pkg/fence). A driver author runs it, next to
// csi-sanity, before claiming any of them. The suite never calls ListFences
// or LiftFence on a driver that does not advertise it.
//
// From Go, call Test from a test function, as with csi-test's sanity.Test:
//
//	func TestFenceSanity(t *testing.T) {
//		sanity.Test(t, sanity.Config{
//			ControllerEndpoint: "unix:///run/csi/controller.sock",
//			Nodes:              []sanity.Node{{Endpoint: "unix:///run/csi/node.sock"}},
//			IO:                 sanity.IOFunc(writeAsNode),
//		})
//	}
//
// Every case is a named subtest (see Cases). A case that does not apply to
// the capabilities the driver advertises is skipped with the reason, never
// passed. Run does the same without a *testing.T and returns one Result per
// case; the fence-sanity command (pkg/fence/cmd/fence-sanity) is built on it.
//
// The contract the cases check is the one of api/fence/v1/fenceline_fence.proto
// and docs/fence-extension.md.
package sanity

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// IOHook performs I/O on a volume as a node. The driver author provides it,
// because only the driver knows how a node reaches its storage: write a block
// through the node's device, append to a file under the published target
// path over SSH, call the array's data API as that host, and so on.
//
// Write must return nil when the node could write to the volume and an error
// when the storage refused the I/O. It must not retry a refused write for
// long: fence-sanity calls it right after a fence and expects the refusal.
type IOHook interface {
	Write(ctx context.Context, volumeID, nodeID string) error
}

// IOFunc adapts a function to IOHook.
type IOFunc func(ctx context.Context, volumeID, nodeID string) error

// Write implements IOHook.
func (f IOFunc) Write(ctx context.Context, volumeID, nodeID string) error {
	return f(ctx, volumeID, nodeID)
}

// Node is one node plugin of the driver.
type Node struct {
	// ID is the node ID the driver uses in ControllerPublishVolume. Empty:
	// the answer of NodeGetInfo on Endpoint. When set, NodeGetInfo must
	// answer the same.
	ID string
	// Endpoint serves Identity and Node for this node. Empty: the
	// controller endpoint (a driver serving every service on one socket).
	Endpoint string
}

// Config says how to reach the driver under test and how to use it.
type Config struct {
	// ControllerEndpoint serves Identity and Controller (and the
	// FenceCapabilities service): "unix:///path", a bare "/path", or
	// "tcp://host:port". Required.
	ControllerEndpoint string
	// Nodes are the node plugins. The first one is the node that is
	// fenced; further nodes are only checked in discovery. Empty: one node
	// served on ControllerEndpoint.
	Nodes []Node
	// VolumeID is an existing volume to use in every case. Empty: each case
	// creates a volume with CreateVolume and deletes it at its end.
	VolumeID string
	// VolumeNamePrefix prefixes the names of created volumes
	// ("fence-sanity" when empty).
	VolumeNamePrefix string
	// CapacityBytes is the size of created volumes (1 GiB when zero).
	CapacityBytes int64
	// Parameters are passed to CreateVolume.
	Parameters map[string]string
	// VolumeContext is passed to the node calls when VolumeID is set
	// (created volumes use the context CreateVolume returned).
	VolumeContext map[string]string
	// VolumeCapability is used to publish, stage and create volumes.
	// Default: a mount volume, SINGLE_NODE_WRITER.
	VolumeCapability *csi.VolumeCapability
	// StagingDir and TargetDir are the directories under which each case
	// gets its staging and target paths; they must be paths the node plugin
	// can use. The staging path is created, and the parent of the target
	// path, as a CO would. Default: a temporary directory, which works when
	// the suite runs on the node (as csi-sanity does by default).
	StagingDir, TargetDir string
	// IO writes to a volume as a node. Required for the cases that check
	// that a fence cuts I/O; without it they are skipped.
	IO IOHook
	// Secrets are sent with the calls that carry CSI secrets, as a CO
	// sends those a StorageClass names.
	Secrets Secrets
	// Timeout bounds each case, clean-up included (2 minutes when zero).
	Timeout time.Duration
	// Run, when set, runs only the cases whose name it matches.
	Run *regexp.Regexp
}

// Secrets are the CSI secrets of each call the suite makes that carries
// some; a nil map sends none. They are what csi-sanity's secrets file holds
// for the same calls.
type Secrets struct {
	CreateVolume, DeleteVolume                         map[string]string
	ControllerPublishVolume, ControllerUnpublishVolume map[string]string
	NodeStageVolume, NodePublishVolume                 map[string]string
	// ListFences and LiftFence are sent with the fence extension's calls
	// of the same names; csi-sanity has no such calls.
	ListFences, LiftFence map[string]string
}

// Status is the outcome of one case.
type Status string

// The outcomes of a case.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is the outcome of one case.
type Result struct {
	// Name is the case's name, as listed by Cases.
	Name string
	// Status is PASS, FAIL or SKIP.
	Status Status
	// Reason says why a case failed or was skipped.
	Reason string
	// Log holds what the case reported along the way (RPCs that answered
	// as expected, codes seen).
	Log []string
	// Duration is how long the case took.
	Duration time.Duration
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var problems []string
	if c.ControllerEndpoint == "" {
		problems = append(problems, "controller endpoint is required")
	}
	for i, n := range c.Nodes {
		if n.Endpoint == "" && c.ControllerEndpoint == "" {
			problems = append(problems, fmt.Sprintf("node %d has no endpoint", i))
		}
	}
	if c.CapacityBytes < 0 {
		problems = append(problems, "capacity must not be negative")
	}
	if c.Timeout < 0 {
		problems = append(problems, "timeout must not be negative")
	}
	if len(problems) > 0 {
		return fmt.Errorf("fence-sanity configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Run runs every case against the driver cfg describes and returns one
// Result per case, in the order of Cases. The error is only for a
// configuration Run cannot use; what the driver does wrong is in the
// results.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newSuite(cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	var results []Result
	for _, c := range cases {
		if !s.selected(c) {
			s.discoverQuietly(ctx, c)
			continue
		}
		results = append(results, s.runCase(ctx, c))
	}
	return results, nil
}

// selected reports whether Config.Run selects case c.
func (s *suite) selected(c testCase) bool {
	return s.cfg.Run == nil || s.cfg.Run.MatchString(c.name)
}

// discoverQuietly runs the discovery case without reporting it when Run
// leaves it out: the other cases need what it learns.
func (s *suite) discoverQuietly(ctx context.Context, c testCase) {
	if c.name == caseDiscovery {
		s.runCase(ctx, c)
	}
}

// Test runs every case as a subtest of t, named as in Cases: a failing case
// fails its subtest, a case that does not apply is skipped with the reason.
func Test(t *testing.T, cfg Config) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := newSuite(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	for _, c := range cases {
		c := c
		if !s.selected(c) {
			s.discoverQuietly(context.Background(), c)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			r := s.runCase(context.Background(), c)
			for _, line := range r.Log {
				t.Log(line)
			}
			switch r.Status {
			case Fail:
				t.Fatal(r.Reason)
			case Skip:
				t.Skip(r.Reason)
			}
		})
	}
}

// Cases lists the names of the cases, in the order they run.
func Cases() []string {
	names := make([]string, 0, len(cases))
	for _, c := range cases {
		names = append(names, c.name)
	}
	return names
}

// errSkip is returned by a case (wrapped in skipError) that does not apply.
var errSkip = errors.New("skipped")

type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }
func (e skipError) Unwrap() error { return errSkip }

// skipf returns the error that makes a case report SKIP with the reason.
func skipf(format string, args ...any) error {
	return skipError{reason: fmt.Sprintf(format, args...)}
}

// runCase runs one case with its own deadline and clean-up.
func (s *suite) runCase(parent context.Context, c testCase) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	e := &env{ctx: ctx, s: s, name: c.name}
	err := s.prerequisite(c)
	if err == nil {
		err = c.run(e)
	}
	cleanupErr := e.cleanup()
	e.removeDirs()
	r := Result{Name: c.name, Status: Pass, Log: e.log, Duration: time.Since(start)}
	var skip skipError
	switch {
	case errors.As(err, &skip):
		r.Status, r.Reason = Skip, skip.reason
	case err != nil:
		r.Status, r.Reason = Fail, err.Error()
	case cleanupErr != nil:
		r.Status, r.Reason = Fail, "clean-up: "+cleanupErr.Error()
	}
	if c.name == caseDiscovery {
		s.discovered = r.Status == Pass
		if !s.discovered {
			s.discoveryFailure = r.Reason
		}
	}
	return r
}

// defaults fills in the defaults of cfg, but for the staging and target
// directories (see newSuite).
func (c Config) defaults() Config {
	if len(c.Nodes) == 0 {
		c.Nodes = []Node{{}}
	}
	nodes := make([]Node, len(c.Nodes))
	copy(nodes, c.Nodes)
	for i := range nodes {
		if nodes[i].Endpoint == "" {
			nodes[i].Endpoint = c.ControllerEndpoint
		}
	}
	c.Nodes = nodes
	if c.VolumeNamePrefix == "" {
		c.VolumeNamePrefix = "fence-sanity"
	}
	if c.CapacityBytes == 0 {
		c.CapacityBytes = 1 << 30
	}
	if c.VolumeCapability == nil {
		c.VolumeCapability = &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	return c
}
