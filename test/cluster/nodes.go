package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// NodeReadyTimeout bounds how long AddNode and PowerOn wait for KWOK to
// report a node Ready.
const NodeReadyTimeout = 30 * time.Second

// AddNode creates a KWOK node that is powered on, has the attach/detach
// controller annotation and a boot ID, and a CSINode listing each driver
// with the node name as its CSI node ID, as a kubelet does when a driver
// registers. It returns once the node is Ready.
func (c *Cluster) AddNode(ctx context.Context, name string, drivers ...string) error {
	return c.AddNodeWithIP(ctx, name, "", drivers...)
}

// AddNodeWithIP is AddNode for a node whose InternalIP is ip (127.0.0.1
// when empty), as a network fence sees it.
func (c *Cluster) AddNodeWithIP(ctx context.Context, name, ip string, drivers ...string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{corev1.LabelHostname: name, "type": "kwok"},
		Annotations: map[string]string{names.ControllerManagedAttachAnnotation: "true"},
	}}
	if ip != "" {
		node.Annotations[InternalIPAnnotation] = ip
	}
	// Created without the power label, so that the boot ID is in place
	// before KWOK first writes the node's status.
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	if err := c.setBootID(ctx, name); err != nil {
		return err
	}
	if len(drivers) > 0 {
		csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, d := range drivers {
			csiNode.Spec.Drivers = append(csiNode.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
		}
		if _, err := c.client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CSINode %s: %w", name, err)
		}
	}
	return c.PowerOn(ctx, name)
}

// PowerOff makes KWOK stop managing the node: no more heartbeats, lease
// renewals or pod updates, exactly what the control plane sees of a node
// that lost power. It does not wait for the node to turn NotReady.
func (c *Cluster) PowerOff(ctx context.Context, name string) error {
	return c.patchPowerLabel(ctx, name, nil)
}

// PowerOn gives the node a new boot ID (as a reboot does) and hands it back
// to KWOK, then waits until it is Ready again.
func (c *Cluster) PowerOn(ctx context.Context, name string) error {
	if err := c.setBootID(ctx, name); err != nil {
		return err
	}
	on := PoweredOn
	if err := c.patchPowerLabel(ctx, name, &on); err != nil {
		return err
	}
	return c.WaitNodeReady(ctx, name, corev1.ConditionTrue, NodeReadyTimeout)
}

// BootID returns the node's status.nodeInfo.bootID.
func (c *Cluster) BootID(ctx context.Context, name string) (string, error) {
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting node %s: %w", name, err)
	}
	return n.Status.NodeInfo.BootID, nil
}

// WaitNodeReady waits until the node's Ready condition has the given status
// (True, or Unknown after a power cut).
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, status corev1.ConditionStatus, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient; keep polling until the deadline
		}
		cond := nodeutil.ReadyCondition(n)
		return cond != nil && cond.Status == status, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s Ready=%s: %w", name, status, err)
	}
	return nil
}

func (c *Cluster) setBootID(ctx context.Context, name string) error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("generating boot ID: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"bootID": hex.EncodeToString(b)}}})
	if err != nil {
		return fmt.Errorf("encoding boot ID patch: %w", err)
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("setting boot ID of node %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) patchPowerLabel(ctx context.Context, name string, value *string) error {
	var v any
	if value != nil {
		v = *value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{PoweredLabel: v}}})
	if err != nil {
		return fmt.Errorf("encoding power patch: %w", err)
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("switching power of node %s: %w", name, err)
	}
	return nil
}
