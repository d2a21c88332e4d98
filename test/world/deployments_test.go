package world

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// chartLikeDeployment is a Deployment shaped as the chart renders one.
func chartLikeDeployment(edit func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fenceline-controller"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				ServiceAccountName: "fenceline-controller",
				Containers: []corev1.Container{{
					Name:    "fenceline-controller",
					Command: []string{"/fenceline-controller"},
					Args:    []string{"--controllers=*", "--leader-election", "--http-endpoint=:8080", "--v=2"},
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
					}},
				}},
			}},
		},
	}
	if edit != nil {
		edit(d)
	}
	return d
}

func TestPodCommandOf(t *testing.T) {
	container := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }
	tests := []struct {
		name    string
		edit    func(*appsv1.Deployment)
		want    podCommand
		wantErr string
	}{
		{
			name: "the chart's shape: entrypoint binary, arguments less the HTTP endpoint, probe path",
			want: podCommand{binary: "fenceline-controller", args: []string{"--controllers=*", "--leader-election", "--v=2"},
				serviceAccount: "fenceline-controller", replicas: 2, healthPath: "/healthz"},
		},
		{
			name: "replicas unset means one; a numeric probe port matching the endpoint",
			edit: func(d *appsv1.Deployment) {
				d.Spec.Replicas = nil
				container(d).LivenessProbe.HTTPGet.Port = intstr.FromInt32(8080)
			},
			want: podCommand{binary: "fenceline-controller", args: []string{"--controllers=*", "--leader-election", "--v=2"},
				serviceAccount: "fenceline-controller", replicas: 1, healthPath: "/healthz"},
		},
		{
			name: "no liveness probe: no health path",
			edit: func(d *appsv1.Deployment) { container(d).LivenessProbe = nil },
			want: podCommand{binary: "fenceline-controller", args: []string{"--controllers=*", "--leader-election", "--v=2"},
				serviceAccount: "fenceline-controller", replicas: 2},
		},
		{
			name:    "probe on a port the endpoint does not listen on",
			edit:    func(d *appsv1.Deployment) { container(d).Args[2] = "--http-endpoint=:9090" },
			wantErr: "not the container's --http-endpoint",
		},
		{
			name:    "probe without any endpoint",
			edit:    func(d *appsv1.Deployment) { container(d).Args = container(d).Args[:2] },
			wantErr: "not the container's --http-endpoint",
		},
		{
			name: "a sidecar",
			edit: func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy"})
			},
			wantErr: "exactly one container",
		},
		{
			name: "an init container",
			edit: func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init"}}
			},
			wantErr: "no init containers",
		},
		{
			name:    "the image's entrypoint, no command",
			edit:    func(d *appsv1.Deployment) { container(d).Command = nil },
			wantErr: "want the command /<binary>",
		},
		{
			name:    "a relative command",
			edit:    func(d *appsv1.Deployment) { container(d).Command = []string{"fenceline-controller"} },
			wantErr: "want the command /<binary>",
		},
		{
			name:    "the default ServiceAccount",
			edit:    func(d *appsv1.Deployment) { d.Spec.Template.Spec.ServiceAccountName = "" },
			wantErr: "no serviceAccountName",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podCommandOf(chartLikeDeployment(tt.edit))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.binary != tt.want.binary || !slices.Equal(got.args, tt.want.args) || got.serviceAccount != tt.want.serviceAccount ||
				got.replicas != tt.want.replicas || got.healthPath != tt.want.healthPath {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
