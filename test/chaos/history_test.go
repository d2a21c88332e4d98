package chaos

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKubeletStopped(t *testing.T) {
	deleting := metav1.Now()
	terminated := corev1.ContainerStatus{Name: "db", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
	running := corev1.ContainerStatus{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	pod := func(del *metav1.Time, cs ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: del}, Status: corev1.PodStatus{ContainerStatuses: cs}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"being deleted, every container terminated", pod(&deleting, terminated), true},
		{"being deleted, one container still running", pod(&deleting, terminated, running), false},
		{"being deleted, no container status: nobody reported a stop", pod(&deleting), false},
		{"terminated but never asked to go: not a graceful deletion finished", pod(nil, terminated), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeletStopped(tt.pod); got != tt.want {
				t.Errorf("kubeletStopped = %v, want %v", got, tt.want)
			}
		})
	}
}
