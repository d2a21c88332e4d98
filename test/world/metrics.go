package world

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"fenceline.io/fenceline/test/cluster"
)

// MetricsEndpoint is where one component process serves its metrics and
// health checks (--http-endpoint), as a pod's container port is scraped.
type MetricsEndpoint struct {
	// Process names the process (and its log, <Process>.log).
	Process string
	// Binary is the program it runs: fenceline-controller,
	// fenceline-fence-agent, fenceline-attacher (or upstream's
	// csi-attacher with Options.AttacherPath).
	Binary string
	// Address is host:port on the loopback interface.
	Address string
}

// endpoints records the components' metrics endpoints as they start.
type endpoints struct {
	mu   sync.Mutex
	list []MetricsEndpoint
}

// MetricsEndpoints returns the metrics endpoint of every component process
// started so far that serves one: all of them with Options.Metrics, the
// installed Deployments' replicas with Options.Installer. A process
// restarted by a kill keeps its port; a replacement replica gets its own.
func (w *World) MetricsEndpoints() []MetricsEndpoint {
	w.endpoints.mu.Lock()
	defer w.endpoints.mu.Unlock()
	return slices.Clone(w.endpoints.list)
}

// withMetricsEndpoint returns args with --http-endpoint on a free loopback
// port when the world serves metrics and args name none, and records the
// endpoint args end up with, if any, for process name running binary.
func (w *World) withMetricsEndpoint(name, binary string, args []string) ([]string, error) {
	addr := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, httpEndpointFlag); ok {
			addr = v
		}
	}
	if addr == "" && w.metrics {
		port, err := cluster.FreePort()
		if err != nil {
			return nil, fmt.Errorf("a metrics port for %s: %w", name, err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(slices.Clone(args), httpEndpointFlag+addr)
	}
	if addr != "" {
		w.endpoints.mu.Lock()
		w.endpoints.list = append(w.endpoints.list, MetricsEndpoint{Process: name, Binary: binary, Address: addr})
		w.endpoints.mu.Unlock()
	}
	return args, nil
}
