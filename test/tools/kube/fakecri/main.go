// Command fake-cri serves the Kubernetes CRI (runtime and image services)
// on a unix socket from k8s.io/cri-client's in-memory fake, set up so that
// a real kubelet runs pods on it without a container runtime: images have
// a size, the runtime and its network report ready, the image filesystem
// reports usage, and the cgroup driver is cgroupfs. Nothing runs and
// nothing is mounted; the state lives in memory only, so restarting this
// process is a reboot of the node's containers.
//
// With --register it also does the node-driver-registrar's job for CSI
// drivers whose node sockets already run: it serves their registration
// sockets in the kubelet's plugins_registry (--registry-dir).
//
// With --events it appends one JSON line per container start and stop,
// with the container's pod and the host paths of its mounts, so that a
// test can run the container's "workload" (writes to its volumes) for as
// long as the runtime says the container runs, whatever its kubelet does.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// Event is one line of the --events file.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"` // "start" or "stop"
	Container string    `json:"container"`
	Name      string    `json:"name"`
	PodUID    string    `json:"podUID"`
	PodName   string    `json:"podName"`
	Namespace string    `json:"namespace"`
	// Mounts are the host paths the container mounts.
	Mounts []string `json:"mounts,omitempty"`
}

// runtime is the fake with the calls that matter to a test's workload
// wrapped: it remembers each container's mounts and reports starts and
// stops.
type runtime struct {
	*fake.RemoteRuntime
	mu     sync.Mutex
	mounts map[string][]string
	events *json.Encoder
}

func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err == nil {
		var paths []string
		for _, m := range req.GetConfig().GetMounts() {
			paths = append(paths, m.GetHostPath())
		}
		r.mu.Lock()
		r.mounts[resp.ContainerId] = paths
		r.mu.Unlock()
	}
	return resp, err
}

func (r *runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err == nil {
		r.emit("start", req.ContainerId)
	}
	return resp, err
}

func (r *runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	resp, err := r.RemoteRuntime.StopContainer(ctx, req)
	if err == nil {
		r.emit("stop", req.ContainerId)
	}
	return resp, err
}

func (r *runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.emit("stop", req.ContainerId) // a removal ends a container still running
	resp, err := r.RemoteRuntime.RemoveContainer(ctx, req)
	r.mu.Lock()
	delete(r.mounts, req.ContainerId)
	r.mu.Unlock()
	return resp, err
}

// emit writes the event of container id, if events are asked for.
func (r *runtime) emit(kind, id string) {
	if r.events == nil {
		return
	}
	ev := Event{Time: time.Now(), Kind: kind, Container: id}
	r.RuntimeService.Lock()
	if c := r.RuntimeService.Containers[id]; c != nil {
		ev.Name = c.GetMetadata().GetName()
		ev.PodUID = c.Labels["io.kubernetes.pod.uid"]
		ev.PodName = c.Labels["io.kubernetes.pod.name"]
		ev.Namespace = c.Labels["io.kubernetes.pod.namespace"]
	}
	r.RuntimeService.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Mounts = r.mounts[id]
	_ = r.events.Encode(ev)
}

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve the CRI on: unix:///path. Required.")
	fsPath := flag.String("fs-path", "/", "mount point the image filesystem reports")
	eventsPath := flag.String("events", "", "file to append container start and stop events to (JSON lines)")
	registry := flag.String("registry-dir", "", "the kubelet's plugins_registry directory, for --register")
	var drivers stringList
	flag.Var(&drivers, "register", "a CSI driver to register with the kubelet: <driver>=<node socket path> (repeatable; needs --registry-dir)")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "fake-cri: --endpoint is required")
		os.Exit(2)
	}
	if len(drivers) > 0 && *registry == "" {
		fmt.Fprintln(os.Stderr, "fake-cri: --register needs --registry-dir")
		os.Exit(2)
	}
	if err := run(*endpoint, *fsPath, *eventsPath, *registry, drivers); err != nil {
		fmt.Fprintf(os.Stderr, "fake-cri: %v\n", err)
		os.Exit(1)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func run(endpoint, fsPath, eventsPath, registry string, drivers []string) error {
	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(1 << 20)
	used := &runtimeapi.UInt64Value{Value: 1 << 20}
	f.ImageService.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp: time.Now().UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: fsPath},
		UsedBytes: used, InodesUsed: &runtimeapi.UInt64Value{Value: 100},
	}})
	f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	r := &runtime{RemoteRuntime: f, mounts: map[string][]string{}}
	if eventsPath != "" {
		ef, err := os.OpenFile(eventsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer ef.Close()
		r.events = json.NewEncoder(ef)
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, r)
	runtimeapi.RegisterImageServiceServer(server, r)
	l, err := util.CreateListener(endpoint)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", endpoint, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := register(ctx, registry, drivers); err != nil {
		return err
	}
	go func() { <-ctx.Done(); server.Stop() }()
	return server.Serve(l)
}
