package monitoring

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"fenceline.io/fenceline/test/cluster"
)

// podMonitor is a monitoring.coreos.com/v1 PodMonitor, as far as the
// check reads it.
type podMonitor struct {
	Spec struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port string `json:"port"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// Every PodMonitor of the component scrapes something: a pod template of
// the manifests (deploy/ and the mock driver's example, whose attacher
// sidecar stands for a CSI driver's) matches its selector and has a
// container port of the name it scrapes. A renamed port or label would
// otherwise leave a component unscraped, which only the NoLeader alerts
// would show, as if the component were down.
func TestPodMonitorsFindTheirPods(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	monitors := renderKinds(t, componentOverlay(t, ""))
	var templates []appsv1.Deployment
	for _, dir := range []string{"deploy", filepath.Join("deploy", "examples", "mock-driver")} {
		for key, obj := range renderKinds(t, filepath.Join(root, dir)) {
			if obj["kind"] != "Deployment" {
				continue
			}
			var d appsv1.Deployment
			convert(t, key, obj, &d)
			templates = append(templates, d)
		}
	}
	n := 0
	for key, obj := range monitors {
		if obj["kind"] != "PodMonitor" {
			continue
		}
		n++
		var pm podMonitor
		convert(t, key, obj, &pm)
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if !anyPodServes(templates, sel, ep.Port) {
				t.Errorf("%s scrapes port %q of pods %s, but no pod template of the manifests has both", key, ep.Port, sel)
			}
		}
	}
	if n != 3 {
		t.Errorf("the component renders %d PodMonitors, want 3 (controller, fence agent, attacher)", n)
	}
}

// anyPodServes reports whether a Deployment's pod template matches sel and
// has a container port named port.
func anyPodServes(ds []appsv1.Deployment, sel labels.Selector, port string) bool {
	for _, d := range ds {
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == port {
					return true
				}
			}
		}
	}
	return false
}

func convert(t *testing.T, key string, obj map[string]any, into any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}
