package world

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// StorageClassName is the StorageClass of the mock driver's volumes.
const StorageClassName = "mock-rwo"

// VolumeSize is the size of the volumes the world provisions.
const VolumeSize = 1 << 30

// ClaimTemplate is the volumeClaimTemplate name of StatefulSet.
const ClaimTemplate = "data"

// CreateVolume creates a volume on the (first) mock array through the CSI
// controller service and returns its handle.
func (w *World) CreateVolume(ctx context.Context, name string) (string, error) {
	return w.CreateVolumeOn(ctx, DriverName, name)
}

// CreateVolumeOn is CreateVolume on the array of the mock driver named
// driver.
func (w *World) CreateVolumeOn(ctx context.Context, driver, name string) (string, error) {
	v, err := w.driver(driver)
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient(v.controllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("connecting to the driver: %w", err)
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: VolumeSize},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
	})
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	return resp.GetVolume().GetVolumeId(), nil
}

// CreateStorageClass creates the mock driver's StorageClass, and one for
// the second driver's volumes in a world that runs it. Volumes are
// pre-provisioned (see ProvisionStatefulSet), so no provisioner runs.
func (w *World) CreateStorageClass(ctx context.Context) error {
	for _, d := range w.DriverNames() {
		sc := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: w.StorageClassOf(d)},
			Provisioner:       d,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		}
		if _, err := w.Cluster.Client().StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating StorageClass %s: %w", sc.Name, err)
		}
	}
	return nil
}

// ProvisionStatefulSet creates, for each ordinal of the StatefulSet
// namespace/name, a volume on the array and a PersistentVolume pre-bound to
// the claim the StatefulSet will create, as a provisioner would have. It
// returns the volume handles by ordinal.
func (w *World) ProvisionStatefulSet(ctx context.Context, namespace, name string, replicas int) ([]string, error) {
	return w.ProvisionStatefulSetWithAccessModes(ctx, namespace, name, replicas, corev1.ReadWriteOnce)
}

// ProvisionStatefulSetWithAccessModes is ProvisionStatefulSet with PVs
// that allow these access modes, e.g. ReadWriteOnce and ReadWriteMany: a
// claim of StatefulSet (ReadWriteOnce) binds to such a PV, and the PV is
// what the controller judges a volume by.
func (w *World) ProvisionStatefulSetWithAccessModes(ctx context.Context, namespace, name string, replicas int, modes ...corev1.PersistentVolumeAccessMode) ([]string, error) {
	return w.ProvisionStatefulSetOn(ctx, DriverName, namespace, name, replicas, modes...)
}

// ProvisionStatefulSetOn is ProvisionStatefulSetWithAccessModes with the
// volumes on the mock driver named driver, their PVs in its StorageClass
// (StorageClassOf): the StatefulSet's claims must ask for that class
// (StatefulSetOf).
func (w *World) ProvisionStatefulSetOn(ctx context.Context, driver, namespace, name string, replicas int, modes ...corev1.PersistentVolumeAccessMode) ([]string, error) {
	class := w.StorageClassOf(driver)
	var handles []string
	for i := range replicas {
		claim := fmt.Sprintf("%s-%s-%d", ClaimTemplate, name, i)
		handle, err := w.CreateVolumeOn(ctx, driver, namespace+"-"+claim)
		if err != nil {
			return nil, err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-" + namespace + "-" + claim},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(VolumeSize, resource.BinarySI)},
				AccessModes:                   modes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: driver, VolumeHandle: handle, FSType: "ext4",
				}},
			},
		}
		if _, err := w.Cluster.Client().CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating PV for %s: %w", claim, err)
		}
		handles = append(handles, handle)
	}
	return handles, nil
}

// TolerationSeconds is how long the world's pods tolerate a NotReady or
// unreachable node, instead of the default 300 s.
const TolerationSeconds = 2

// StatefulSet returns a StatefulSet of replicas pods, each with one RWO
// claim of the mock StorageClass, spread over nodes, tolerating a lost node
// for TolerationSeconds.
func StatefulSet(namespace, name string, replicas int32) *appsv1.StatefulSet {
	return StatefulSetOf(namespace, name, replicas, StorageClassName)
}

// StatefulSetOf is StatefulSet with claims of storageClass, e.g. the
// second driver's (SecondStorageClassName).
func StatefulSetOf(namespace, name string, replicas int32, storageClass string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "db", Image: "registry.example/db:1",
						VolumeMounts: []corev1.VolumeMount{{Name: ClaimTemplate, MountPath: "/data"}},
					}},
					Tolerations: LostNodeTolerations(TolerationSeconds),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: ClaimTemplate},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(storageClass),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: *resource.NewQuantity(VolumeSize, resource.BinarySI),
					}},
				},
			}},
		},
	}
}

// LostNodeTolerations tolerates the not-ready and unreachable NoExecute
// taints for seconds, so that taint eviction starts quickly in tests.
func LostNodeTolerations(seconds int64) []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(seconds)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(seconds)},
	}
}
