package world

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/test/cluster"
)

// An Installer puts the product's objects into the cluster the way a user
// does (the Helm chart, say) in place of deploy/<component>/rbac.yaml: the
// ServiceAccounts and RBAC of every component, the CRDs, and the
// Deployments of fenceline-controller and fenceline-fence-agent, all in
// Namespace. With Options.Installer, Launch runs those two components as
// their installed Deployments say (RunDeployment) and the attacher under
// the installed ServiceAccount fenceline-attacher.
type Installer interface {
	Install(ctx context.Context, c *cluster.Cluster) error
}

// httpEndpointFlag is the flag of the components' metrics and health
// endpoint; a Deployment sets it to a container port.
const httpEndpointFlag = "--http-endpoint="

// Deployment names of the components an Installer installs.
const (
	ControllerDeployment = "fenceline-controller"
	FenceAgentDeployment = "fenceline-fence-agent"
)

// podCommand is what RunDeployment runs for one Deployment: the binary its
// container's entrypoint names, with the container's arguments less the
// HTTP endpoint (each replica gets its own port on this host, where a pod
// has its own network namespace), under the pod's ServiceAccount.
type podCommand struct {
	binary         string
	args           []string
	serviceAccount string
	replicas       int
	// healthPath is the liveness probe's HTTP path, "" without one.
	healthPath string
}

// podCommandOf reads a Deployment as a kubelet would start its pods: one
// container, whose command is /<binary> (the images' entrypoint layout),
// and an explicit ServiceAccount. Anything else is an error rather than a
// guess, so that a chart change that this stand-in cannot honour fails
// the test instead of running something other than what was installed.
func podCommandOf(d *appsv1.Deployment) (podCommand, error) {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		return podCommand{}, fmt.Errorf("deployment %s: want exactly one container and no init containers, got %d and %d", d.Name, len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if len(c.Command) != 1 || !path.IsAbs(c.Command[0]) {
		return podCommand{}, fmt.Errorf("deployment %s: want the command /<binary>, got %q", d.Name, c.Command)
	}
	if spec.ServiceAccountName == "" {
		return podCommand{}, fmt.Errorf("deployment %s: no serviceAccountName (the default ServiceAccount has no RBAC)", d.Name)
	}
	pc := podCommand{binary: path.Base(c.Command[0]), serviceAccount: spec.ServiceAccountName, replicas: 1}
	if d.Spec.Replicas != nil {
		pc.replicas = int(*d.Spec.Replicas)
	}
	listen := ""
	for _, a := range c.Args {
		if endpoint, ok := strings.CutPrefix(a, httpEndpointFlag); ok {
			listen = endpoint
		} else {
			pc.args = append(pc.args, a)
		}
	}
	if p := c.LivenessProbe; p != nil && p.HTTPGet != nil {
		if !probesHTTPEndpoint(c.Ports, p.HTTPGet.Port.String(), listen) {
			return podCommand{}, fmt.Errorf("deployment %s: the liveness probe's port %s is not the container's --http-endpoint", d.Name, p.HTTPGet.Port.String())
		}
		pc.healthPath = p.HTTPGet.Path
	}
	return pc, nil
}

// probesHTTPEndpoint says whether probePort (a number or a port name) is
// the port of listen, the container's --http-endpoint ("" when unset).
func probesHTTPEndpoint(ports []corev1.ContainerPort, probePort, listen string) bool {
	i := strings.LastIndex(listen, ":")
	if i < 0 {
		return false
	}
	want := listen[i+1:]
	if probePort == want {
		return true
	}
	for _, p := range ports {
		if p.Name == probePort && strconv.Itoa(int(p.ContainerPort)) == want {
			return true
		}
	}
	return false
}

// RunDeployment starts the installed Deployment name's replicas as local
// processes, as the kubelets of the nodes its pods land on would run
// them: its entrypoint's binary from bin/, its arguments, its
// ServiceAccount's identity. Each replica listens on a port of its own for
// --http-endpoint and counts as started once its liveness probe's path
// answers 200. The pods the Deployment makes on the KWOK nodes are
// KWOK's; these processes are the containers they stand for. Processes
// log to <name>-<i>.log. It returns the processes and the arguments a
// replacement replica is started with.
func (w *World) RunDeployment(ctx context.Context, name string) ([]*cluster.Process, []string, error) {
	if !w.installed {
		return nil, nil, fmt.Errorf("running deployment %s: nothing was installed (Options.Installer)", name)
	}
	d, err := w.Cluster.Client().AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the installed deployment %s: %w", name, err)
	}
	pc, err := podCommandOf(d)
	if err != nil {
		return nil, nil, err
	}
	if pc.replicas < 1 {
		return nil, nil, fmt.Errorf("deployment %s has %d replicas: nothing would run", name, pc.replicas)
	}
	var procs []*cluster.Process
	for i := range pc.replicas {
		port, err := cluster.FreePort()
		if err != nil {
			return procs, nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		args := append(append([]string{}, pc.args...), httpEndpointFlag+addr)
		p, err := w.startComponentAs(ctx, fmt.Sprintf("%s-%d", name, i), pc.binary, "", pc.serviceAccount, args)
		if err != nil {
			return procs, nil, err
		}
		procs = append(procs, p)
		if pc.healthPath != "" {
			if err := WaitHealthy(ctx, p, "http://"+addr+pc.healthPath); err != nil {
				return procs, nil, err
			}
		}
	}
	return procs, pc.args, nil
}

// WaitHealthy waits until url answers 200, as a liveness probe passes; it
// fails at once if p exits.
func WaitHealthy(ctx context.Context, p *cluster.Process, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return WaitFor(ctx, readyTimeout, p.Name+" healthy at "+url, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, fmt.Errorf("probe request: %w", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// checkInstallerOptions refuses options an installed product cannot
// honour: its components' flags come from the install.
func checkInstallerOptions(o Options) error {
	if len(o.ControllerArgs) > 0 || o.ControllerReplicas > 0 || len(o.FenceAgentArgs) > 0 || o.TaintEviction {
		return fmt.Errorf("with an Installer, set the controller's and the fence agent's flags and replicas through the install (chart values), not ControllerArgs, ControllerReplicas, FenceAgentArgs or TaintEviction")
	}
	if o.APIProxy {
		return fmt.Errorf("with an Installer, the components run with their pods' kubeconfigs: APIProxy is not supported")
	}
	return nil
}

// runInstalledController runs the installed fenceline-controller
// Deployment and makes its leading replica World.Controller, once one
// leads (the replicas run with leader election, as installed).
func (w *World) runInstalledController(ctx context.Context) error {
	procs, args, err := w.RunDeployment(ctx, ControllerDeployment)
	w.Controllers = procs
	if err != nil {
		return err
	}
	w.controllerArgs = args
	leader, err := w.LeadingController(ctx, readyTimeout)
	if err != nil {
		return err
	}
	w.Controller = leader
	return nil
}
