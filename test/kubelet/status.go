package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// mountedLocked returns the unique names of the volumes the node still has
// (staged, published or waiting for clean-up), sorted: what a kubelet's
// volume manager reports in use.
func (k *Kubelet) mountedLocked() []string {
	out := make([]string, 0, len(k.vols))
	for key := range k.vols {
		if !k.drivers[key.driver].noAttach {
			out = append(out, string(nodeutil.CSIUniqueVolumeName(key.driver, key.handle)))
		}
	}
	sort.Strings(out)
	return out
}

// reportHealedLocked sends the first status update after a healed
// partition.
func (k *Kubelet) reportHealedLocked(ctx context.Context, inUse []string) error {
	patch, err := healPatch(inUse, time.Now())
	if err != nil {
		return fmt.Errorf("kubelet stand-in %s: %w", k.cfg.NodeName, err)
	}
	return k.patchNodeStatus(ctx, patch, "reporting Ready after the partition")
}

// patchNodeStatus sends a strategic merge patch of the node's status; the
// error says what it was doing.
func (k *Kubelet) patchNodeStatus(ctx context.Context, patch []byte, doing string) error {
	if _, err := k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("kubelet stand-in %s: %s: %w", k.cfg.NodeName, doing, err)
	}
	return nil
}

// healPatch is the status update of a kubelet whose partition healed: Ready
// and volumesInUse together, so that no reader ever sees the node Ready with
// a volumesInUse that leaves out what it still has mounted. A strategic
// merge patch keeps the other conditions (merged by type).
func healPatch(inUse []string, now time.Time) ([]byte, error) {
	ts := metav1.NewTime(now)
	if inUse == nil {
		inUse = []string{} // an explicit empty list clears a stale report
	}
	status := map[string]any{
		"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: ts, LastTransitionTime: ts,
		}},
		"volumesInUse": inUse,
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("encoding the status update: %w", err)
	}
	return patch, nil
}
