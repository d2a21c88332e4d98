package sanity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fenceline.io/fenceline/pkg/fence"
)

// suite holds the connections and what discovery learnt about the driver.
type suite struct {
	cfg      Config
	tempDirs []string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // endpoint -> connection

	// Filled in by the discovery case.
	discovered       bool
	discoveryFailure string
	caps             driverCaps
}

// driverCaps is what the driver advertised, per plugin.
type driverCaps struct {
	// unpublishFence: the controller endpoint advertises UNPUBLISH_FENCE.
	unpublishFence bool
	// publishUnpublish: the controller has PUBLISH_UNPUBLISH_VOLUME.
	publishUnpublish bool
	// createDelete: the controller has CREATE_DELETE_VOLUME.
	createDelete bool
	// listFences, liftFence: the controller endpoint advertises
	// LIST_FENCES, LIFT_FENCE. The suite calls neither RPC otherwise.
	listFences, liftFence bool
	// listPublished: the controller has LIST_VOLUMES and
	// LIST_VOLUMES_PUBLISHED_NODES, so ListVolumes says where a volume is
	// published.
	listVolumes, listPublished bool
	// nodes has one entry per Config.Nodes entry.
	nodes []nodeCaps
}

// nodeCaps is what one node plugin advertised.
type nodeCaps struct {
	id             string
	forceUnpublish bool
	stageUnstage   bool
}

func newSuite(cfg Config) (*suite, error) {
	s := &suite{conns: map[string]*grpc.ClientConn{}}
	for _, d := range []*string{&cfg.StagingDir, &cfg.TargetDir} {
		if *d != "" {
			continue
		}
		dir, err := os.MkdirTemp("", "fence-sanity-")
		if err != nil {
			s.close()
			return nil, fmt.Errorf("creating a directory for staging and target paths: %w", err)
		}
		s.tempDirs = append(s.tempDirs, dir)
		*d = dir
	}
	s.cfg = cfg.defaults()
	return s, nil
}

// close closes every connection and removes the temporary directories.
func (s *suite) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
	for _, d := range s.tempDirs {
		// Not RemoveAll: a path the driver left mounted keeps its data.
		_ = os.Remove(d)
	}
	s.tempDirs = nil
}

// Target turns an endpoint as written in a Config ("unix:///path", a bare
// "/path", "tcp://host:port") into a gRPC dial target.
func Target(endpoint string) (string, error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		if strings.TrimPrefix(endpoint, "unix://") == "" {
			return "", fmt.Errorf("endpoint %q has no socket path", endpoint)
		}
		return endpoint, nil
	case strings.HasPrefix(endpoint, "tcp://"):
		hostPort := strings.TrimPrefix(endpoint, "tcp://")
		if hostPort == "" {
			return "", fmt.Errorf("endpoint %q has no address", endpoint)
		}
		return "passthrough:///" + hostPort, nil
	case strings.HasPrefix(endpoint, "/"):
		return "unix://" + endpoint, nil
	default:
		return "", fmt.Errorf("endpoint %q: want unix:///path, /path or tcp://host:port", endpoint)
	}
}

// conn returns the (shared) connection to endpoint.
func (s *suite) conn(endpoint string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.conns[endpoint]; ok {
		return c, nil
	}
	target, err := Target(endpoint)
	if err != nil {
		return nil, err
	}
	c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	s.conns[endpoint] = c
	return c, nil
}

// prerequisite says whether case c can run at all: every case but
// discovery needs discovery to have passed.
func (s *suite) prerequisite(c testCase) error {
	if c.name == caseDiscovery {
		return nil
	}
	if !s.discovered {
		reason := s.discoveryFailure
		if reason == "" {
			reason = "it did not run"
		}
		return skipf("discovery did not pass (%s), so the driver's capabilities are unknown", reason)
	}
	return nil
}

// env is the state of one running case: its deadline, its log and the
// clean-up it registered.
type env struct {
	ctx      context.Context
	s        *suite
	name     string
	log      []string
	cleanups []func(context.Context) error
	// dirs are the directories paths created, in order.
	dirs []string
}

// logf records a line of the case's log.
func (e *env) logf(format string, args ...any) {
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

// deferCleanup registers f to run at the end of the case, last registered first.
func (e *env) deferCleanup(f func(context.Context) error) {
	e.cleanups = append(e.cleanups, f)
}

// cleanup runs the registered clean-up with a fresh deadline (the case's
// may have expired) and returns every error.
func (e *env) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), e.s.cfg.Timeout)
	defer cancel()
	var errs []string
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		if err := e.cleanups[i](ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	e.cleanups = nil
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// controller returns a client of the controller endpoint.
func (e *env) controller() (csi.ControllerClient, error) {
	c, err := e.s.conn(e.s.cfg.ControllerEndpoint)
	if err != nil {
		return nil, err
	}
	return csi.NewControllerClient(c), nil
}

// node returns a client of node i's endpoint.
func (e *env) node(i int) (csi.NodeClient, error) {
	c, err := e.s.conn(e.s.cfg.Nodes[i].Endpoint)
	if err != nil {
		return nil, err
	}
	return csi.NewNodeClient(c), nil
}

// discoverEndpoint asks endpoint for its plugin name and fence capabilities,
// twice, and checks that the answers agree.
func (e *env) discoverEndpoint(endpoint string) (string, fence.Capabilities, error) {
	c, err := e.s.conn(endpoint)
	if err != nil {
		return "", fence.Capabilities{}, err
	}
	info, err := csi.NewIdentityClient(c).GetPluginInfo(e.ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "", fence.Capabilities{}, fmt.Errorf("GetPluginInfo on %s: %w", endpoint, err)
	}
	first, err := rawCapabilities(e.ctx, c)
	if err != nil {
		return "", fence.Capabilities{}, fmt.Errorf("%s: %w", endpoint, err)
	}
	second, err := rawCapabilities(e.ctx, c)
	if err != nil {
		return "", fence.Capabilities{}, fmt.Errorf("%s, second call: %w", endpoint, err)
	}
	if first != second {
		return "", fence.Capabilities{}, fmt.Errorf("%s answered GetFenceCapabilities with %+v, then with %+v: the answer must not change during the life of the driver", endpoint, first, second)
	}
	return info.GetName(), first, nil
}

// rpcContext is a short context for one RPC within the case.
func (e *env) rpcContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, 30*time.Second)
}

// paths returns the staging and target path for an attachment in this case,
// creating the staging directory and the parent of the target as a CO does.
func (e *env) paths(volumeID string, attempt int) (staging, target string, err error) {
	base := fmt.Sprintf("%s-%d-%d", e.name, time.Now().UnixNano(), attempt)
	staging = filepath.Join(e.s.cfg.StagingDir, base, "staging")
	target = filepath.Join(e.s.cfg.TargetDir, base, "target")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return "", "", fmt.Errorf("creating staging path for %s: %w", volumeID, err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", "", fmt.Errorf("creating the parent of the target path for %s: %w", volumeID, err)
	}
	e.dirs = append(e.dirs, filepath.Dir(staging), staging, filepath.Dir(target), target)
	return staging, target, nil
}

// removeDirs removes the directories of the case's paths, last created
// first, once every clean-up ran. It only removes empty directories: a
// path the driver failed to unmount keeps what is mounted there.
func (e *env) removeDirs() {
	for i := len(e.dirs) - 1; i >= 0; i-- {
		_ = os.Remove(e.dirs[i])
	}
	e.dirs = nil
}
