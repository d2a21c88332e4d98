package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"fenceline.io/fenceline/pkg/names"
)

const (
	fencelineNamespace = "fenceline-system"
	attacherSA         = "fenceline-attacher"
	mockDriverName     = "mock.fenceline.io"
)

// Kustomizations users apply directly; each must render on its own.
var entryPoints = []string{"deploy", "deploy/examples/mock-driver"}

func TestKustomizationsRender(t *testing.T) {
	dirs := kustomizations(t)
	for _, want := range append(entryPoints, "deploy/attacher", "deploy/controller", "deploy/namespace") {
		if !slices.Contains(dirs, want) {
			t.Errorf("no kustomization in %s (found %v)", want, dirs)
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			for _, o := range render(t, dir) {
				if o.GetKind() == "" || o.GetName() == "" {
					t.Errorf("rendered object without kind or name: %v", o.Object)
				}
			}
		})
	}
}

var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// TestImages checks that every container runs the image of the binary it
// starts (fenceline-controller runs in fenceline-controller, ...), with an
// explicit tag.
func TestImages(t *testing.T) {
	bins := imageBinaries(t)
	for _, dir := range entryPoints {
		t.Run(dir, func(t *testing.T) {
			ws := workloads(t, render(t, dir))
			if len(ws) == 0 {
				t.Fatal("no workloads rendered")
			}
			for _, w := range ws {
				for _, c := range append(w.Pod.InitContainers, w.Pod.Containers...) {
					if len(c.Command) == 0 || !strings.HasPrefix(c.Command[0], "/") || !slices.Contains(bins, c.Command[0][1:]) {
						t.Errorf("%s %s container %s: command %q, want [\"/<one of %v>\"]", w.Kind, w.Name, c.Name, c.Command, bins)
						continue
					}
					want := imageOf(c.Command[0][1:])
					name, tag, _ := strings.Cut(c.Image, ":")
					if name != want || !imageTag.MatchString(tag) {
						t.Errorf("%s %s container %s: image %q, want %s:<tag>", w.Kind, w.Name, c.Name, c.Image, want)
					}
				}
			}
		})
	}
}

// TestImageOverride follows docs/deploy.md: an overlay's `images:` entries
// move every Fenceline container to another registry and tag.
func TestImageOverride(t *testing.T) {
	const registry, tag = "registry.example.com/fenceline", "v9.8.7"
	for _, dir := range entryPoints {
		t.Run(dir, func(t *testing.T) {
			overlay := t.TempDir()
			base, err := filepath.Rel(overlay, filepath.Join(repoRoot(t), dir))
			if err != nil {
				t.Fatal(err)
			}
			kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + filepath.ToSlash(base) + "\nimages:\n"
			for _, it := range imageTargets {
				kust += "  - name: " + it.Image + "\n    newName: " + registry + "/" + it.Image + "\n    newTag: " + tag + "\n"
			}
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, w := range workloads(t, render(t, overlay)) {
				for _, c := range w.Pod.Containers {
					n++
					want := registry + "/" + imageOf(strings.TrimPrefix(c.Command[0], "/")) + ":" + tag
					if c.Image != want {
						t.Errorf("%s %s container %s: image %q, want %q", w.Kind, w.Name, c.Name, c.Image, want)
					}
				}
			}
			if n == 0 {
				t.Fatal("overlay rendered no containers")
			}
		})
	}
}

// upstreamAttacherFlags are the flags of the kubernetes-csi external-attacher
// (v4). The sidecar must get only these, so that the same arguments work
// with the upstream image and a switch back needs no edit.
var upstreamAttacherFlags = []string{
	"csi-address", "kubeconfig", "resync", "timeout", "retry-interval-start", "retry-interval-max",
	"worker-threads", "max-entries", "default-fstype", "reconcile-sync", "max-grpc-log-length",
	"feature-gates", "leader-election", "leader-election-namespace", "leader-election-lease-duration",
	"leader-election-renew-deadline", "leader-election-retry-period", "leader-election-labels",
	"kube-api-qps", "kube-api-burst", "http-endpoint", "metrics-address", "metrics-path", "version",
	"v", "vmodule", "logging-format",
}

func flagName(arg string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name
}

func flagValueOf(args []string, name string) (string, bool) {
	for _, a := range args {
		if flagName(a) == name {
			_, v, ok := strings.Cut(a, "=")
			if !ok {
				v = "true"
			}
			return v, true
		}
	}
	return "", false
}

func containerRunning(pod corev1.PodSpec, binary string) (corev1.Container, bool) {
	for _, c := range pod.Containers {
		if len(c.Command) > 0 && c.Command[0] == "/"+binary {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// mountFor returns the volume mounted at the directory holding path.
func mountFor(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	dir := filepath.Dir(path)
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == dir {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// TestMockDriverExample checks the worked example's wiring: the sidecar gets
// upstream csi-attacher arguments, both containers share the socket, the
// driver serves the name its CSIDriver object declares, and the pod runs as
// the attacher's ServiceAccount from deploy/attacher.
func TestMockDriverExample(t *testing.T) {
	objs := render(t, "deploy/examples/mock-driver")
	ws := workloads(t, objs)
	if len(ws) != 1 {
		t.Fatalf("got %d workloads, want the one driver controller", len(ws))
	}
	w := ws[0]
	attacher, ok := containerRunning(w.Pod, "fenceline-attacher")
	if !ok {
		t.Fatal("no fenceline-attacher sidecar")
	}
	driver, ok := containerRunning(w.Pod, "mock-driver")
	if !ok {
		t.Fatal("no mock-driver container")
	}

	t.Run("sidecar arguments are upstream csi-attacher flags", func(t *testing.T) {
		for _, a := range attacher.Args {
			if !strings.HasPrefix(a, "-") || !slices.Contains(upstreamAttacherFlags, flagName(a)) {
				t.Errorf("argument %q is not an upstream csi-attacher flag", a)
			}
		}
		if v, _ := flagValueOf(attacher.Args, "leader-election"); v != "true" {
			t.Error("the sidecar must run with --leader-election, like upstream beside a replicated controller")
		}
		if _, ok := flagValueOf(attacher.Args, "timeout"); !ok {
			t.Error("no --timeout: state the CSI call timeout explicitly")
		}
	})

	t.Run("containers share the CSI socket", func(t *testing.T) {
		addr, ok := flagValueOf(attacher.Args, "csi-address")
		if !ok || !filepath.IsAbs(addr) {
			t.Fatalf("sidecar --csi-address = %q, want an absolute socket path", addr)
		}
		endpoint, _ := flagValueOf(driver.Args, "endpoint")
		if endpoint != "unix://"+addr {
			t.Errorf("driver --endpoint = %q, want unix://%s", endpoint, addr)
		}
		am, ok1 := mountFor(attacher, addr)
		dm, ok2 := mountFor(driver, addr)
		if !ok1 || !ok2 || am.Name != dm.Name {
			t.Fatalf("socket directory %s is not one volume mounted in both containers (attacher %v, driver %v)", filepath.Dir(addr), am, dm)
		}
		for _, v := range w.Pod.Volumes {
			if v.Name == am.Name && v.EmptyDir == nil {
				t.Errorf("socket volume %s is not an emptyDir", v.Name)
			}
		}
	})

	t.Run("CSIDriver matches the driver", func(t *testing.T) {
		name, _ := flagValueOf(driver.Args, "name")
		if name != mockDriverName {
			t.Errorf("driver --name = %q, want %q", name, mockDriverName)
		}
		d := findObject(t, objs, "CSIDriver", mockDriverName)
		if v, _, _ := unstructured.NestedBool(d.Object, "spec", "attachRequired"); !v {
			t.Error("CSIDriver attachRequired is not true: no VolumeAttachments would reach the attacher")
		}
	})

	t.Run("runs as the attacher ServiceAccount", func(t *testing.T) {
		if w.Pod.ServiceAccountName != attacherSA || w.Namespace != fencelineNamespace {
			t.Errorf("pod runs as %s/%s, want %s/%s", w.Namespace, w.Pod.ServiceAccountName, fencelineNamespace, attacherSA)
		}
		sa := findObject(t, objs, "ServiceAccount", attacherSA)
		if sa.GetNamespace() != fencelineNamespace {
			t.Errorf("ServiceAccount namespace %q, want %q", sa.GetNamespace(), fencelineNamespace)
		}
	})

	t.Run("containers are locked down", func(t *testing.T) {
		for _, c := range w.Pod.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container %s: want readOnlyRootFilesystem and no privilege escalation, got %+v", c.Name, sc)
			}
		}
	})
}

func TestControllerDeployment(t *testing.T) {
	objs := render(t, "deploy")
	var found bool
	for _, w := range workloads(t, objs) {
		c, ok := containerRunning(w.Pod, "fenceline-controller")
		if !ok {
			continue
		}
		found = true
		if w.Kind != "Deployment" || w.Replicas == nil || *w.Replicas != 2 {
			t.Errorf("%s %s: want a Deployment with 2 replicas", w.Kind, w.Name)
		}
		var leader bool
		for _, a := range c.Args {
			if strings.HasPrefix(flagName(a), "leader-elect") && !strings.HasSuffix(a, "=false") {
				leader = true
			}
		}
		if !leader {
			t.Errorf("fenceline-controller runs 2 replicas without leader election: args %q", c.Args)
		}
		if w.Namespace != fencelineNamespace {
			t.Errorf("controller in namespace %q, want %q", w.Namespace, fencelineNamespace)
		}
	}
	if !found {
		t.Fatal("deploy/ renders no fenceline-controller")
	}
	findObject(t, objs, "ServiceAccount", attacherSA)
	findObject(t, objs, "Namespace", fencelineNamespace)
}

func TestSafeDetachExample(t *testing.T) {
	objs := readManifest(t, "deploy/examples/safe-detach-csidriver.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "CSIDriver" {
		t.Fatalf("want exactly one CSIDriver, got %d objects", len(objs))
	}
	d := objs[0]
	if got := d.GetAnnotations()[names.SafeDetachAnnotation]; got != "true" {
		t.Errorf("annotation %s = %q, want \"true\"", names.SafeDetachAnnotation, got)
	}
	if v, _, _ := unstructured.NestedBool(d.Object, "spec", "attachRequired"); !v {
		t.Error("a safe-detach driver must use attach/detach (attachRequired: true); otherwise there is nothing to fence")
	}
}

// TestProbesTargetHTTPEndpoint checks that every HTTP probe points at the
// port the container's --http-endpoint listens on (TestComponentRBAC checks
// that the path answers 200 from the real binary).
func TestProbesTargetHTTPEndpoint(t *testing.T) {
	for _, dir := range entryPoints {
		for _, w := range workloads(t, render(t, dir)) {
			for _, c := range w.Pod.Containers {
				for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
					if p == nil || p.HTTPGet == nil {
						continue
					}
					t.Run(dir+"/"+c.Name+"/"+kind, func(t *testing.T) {
						endpoint, ok := flagValueOf(c.Args, "http-endpoint")
						if !ok {
							t.Fatal("HTTP probe on a container without --http-endpoint")
						}
						_, listen, _ := strings.Cut(endpoint, ":")
						port := p.HTTPGet.Port.String()
						for _, cp := range c.Ports {
							if cp.Name == port {
								port = strconv.Itoa(int(cp.ContainerPort))
							}
						}
						if port != listen {
							t.Errorf("probe targets port %s, --http-endpoint=%s listens on %s", p.HTTPGet.Port.String(), endpoint, listen)
						}
					})
				}
			}
		}
	}
}
