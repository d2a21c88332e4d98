package world

import (
	"context"
	"fmt"
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/kubelet"
)

// TgtDriver is DriverOptions for a mock driver on the tgt backend (each
// volume an iSCSI LUN on a tgtd of its own) with fence method method. The
// kubelet stand-ins then stage its volumes by logging in to the target as
// their node's initiator and write stamped blocks through that session,
// which CheckBytes judges. It needs root and Debian's tgt
// (iscsi.RequireTgt).
func TgtDriver(method tgt.FenceMethod, o DriverOptions) DriverOptions {
	o.Args = append(slices.Clone(o.Args), "--backend=tgt", "--fence-method="+string(method))
	return o
}

// ByteVerdict is what the byte checker found on one volume of the tgt
// backend.
type ByteVerdict struct {
	// Driver and Volume name the volume.
	Driver, Volume string
	// Violations are the checker's findings (iscsi.Ledger.Check); none
	// means never two writers on the bytes.
	Violations []string
	// Sent and Acked count the stamped writes of every node to the volume.
	Sent, Acked int
	// Fences counts the fenced unpublishes the driver's audit log records.
	Fences int
}

// CheckBytes reads every volume the kubelet stand-ins wrote stamped blocks
// to, through a fresh iSCSI session of the initiator it is attached to now,
// and judges the bytes against the stand-ins' ledgers and the fences and
// clean-ups the driver's audit log records: independently of the driver's
// own bookkeeping and of the audit invariant. A volume attached nowhere
// cannot be read (no initiator may log in) and is an error.
func (w *World) CheckBytes(ctx context.Context) ([]ByteVerdict, error) {
	var out []ByteVerdict
	audits, err := w.Audits()
	if err != nil {
		return nil, err
	}
	attached, err := w.attachments(ctx)
	if err != nil {
		return nil, err
	}
	for _, key := range w.Ledgers.Volumes() {
		driver, handle, _ := strings.Cut(key, "/")
		l := w.Ledgers.For(key)
		fences := importFences(l, audits[driver], handle)
		va := attached[key]
		if va == nil {
			return nil, fmt.Errorf("volume %s of driver %s is attached nowhere: the byte checker has no initiator to read it as", handle, driver)
		}
		opts, err := loginOf(va)
		if err != nil {
			return nil, err
		}
		s, err := iscsi.LoginGo(ctx, opts, "checker")
		if err != nil {
			return nil, fmt.Errorf("the byte checker's session to %s: %w", handle, err)
		}
		img, err := iscsi.ReadBlocks(s, uint32(min(s.Blocks(), kubelet.BlockSpan)))
		_ = s.Close()
		if err != nil {
			return nil, fmt.Errorf("the byte checker reading %s: %w", handle, err)
		}
		v := ByteVerdict{Driver: driver, Volume: handle, Violations: l.Check(img, s.BlockSize()), Fences: fences}
		v.Sent, v.Acked = l.Writes()
		out = append(out, v)
	}
	return out, nil
}

// importFences gives the ledger the volume's fences and what lifts them
// as the driver recorded them, afresh, and counts the fences. A fenced
// unpublish the array carried out is a fence. A node-side unstage that
// succeeded lifts it, and so does a publish of the volume to the node that
// succeeded after it: the CO attached the volume to that node again, and a
// writer that starts on the new attachment is a new, legitimate one. A
// lift only spares writers whose first write came after it (Ledger.judge):
// a writer of the old attachment stays judged by the fence, however the
// volume was attached again.
func importFences(l *iscsi.Ledger, recs []audit.Record, handle string) int {
	l.ClearFences()
	n := 0
	for _, r := range audit.Filter(recs, audit.Volume(handle)) {
		switch {
		case r.Method == "ControllerUnpublishVolume" && r.Fence && (r.Code == "OK" || r.Applied):
			l.FenceReturnedAt(r.NodeID, r.Time)
			n++
		case r.Method == "NodeUnstageVolume" && r.Code == "OK",
			r.Method == "ControllerPublishVolume" && r.Code == "OK":
			l.LiftedAt(r.NodeID, r.Time)
		}
	}
	return n
}

// attachments returns the attached VolumeAttachments of the mock
// drivers' volumes by their ledger key (kubelet.LedgerKey): one List of
// each kind for every volume checked.
func (w *World) attachments(ctx context.Context) (map[string]*storagev1.VolumeAttachment, error) {
	client := w.Cluster.Client()
	vas, err := client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	handles := map[string]string{}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil {
			handles[pv.Name] = pv.Spec.CSI.VolumeHandle
		}
	}
	out := map[string]*storagev1.VolumeAttachment{}
	for i := range vas.Items {
		va := &vas.Items[i]
		if !va.Status.Attached || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		if h, ok := handles[*va.Spec.Source.PersistentVolumeName]; ok {
			out[kubelet.LedgerKey(va.Spec.Attacher, h)] = va
		}
	}
	return out, nil
}

func loginOf(va *storagev1.VolumeAttachment) (iscsi.Options, error) {
	opts, err := iscsi.FromPublishContext(va.Status.AttachmentMetadata)
	if err != nil {
		return opts, fmt.Errorf("VolumeAttachment %s: %w", va.Name, err)
	}
	opts.ReservationKey = 0 // the checker only reads: it registers nothing
	return opts, nil
}
