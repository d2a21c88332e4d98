package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// Graceful node shutdown (KEP-2000), as the kubelet's node shutdown manager
// does it (pkg/kubelet/nodeshutdown in kubernetes/kubernetes v1.37: the
// Linux manager, its pod manager, and what the Ready condition setter,
// the status manager and the volume manager make of it):
//
//  1. systemd-logind announces the shutdown (PrepareForShutdown); the
//     kubelet holds it back with a delay inhibitor lock. It posts its node
//     Ready=False, reason KubeletNotReady, message "node is shutting down",
//     records a Normal Event "Shutdown" on the Node, keeps renewing its
//     Lease, and from then on rejects every pod it has not admitted yet
//     (Failed, reason NodeShutdown).
//  2. It kills its active pods in priority groups: pods below
//     system-cluster-critical first, with shutdownGracePeriod minus
//     shutdownGracePeriodCriticalPods, then critical pods with the rest.
//     Each pod gets the group's grace, or its own
//     terminationGracePeriodSeconds when shorter, and is SIGKILLed at its
//     end. Once its containers have stopped (not before: the status manager
//     holds a terminal phase back while containers may run) the pod is
//     reported Failed, reason Terminated, message "Pod was terminated in
//     response to imminent node shutdown.", with the condition
//     DisruptionTarget=True, reason TerminationByKubelet. Its volumes are
//     then unmounted (NodeUnpublishVolume, then NodeUnstageVolume) by the
//     volume manager, and the group waits for the unpublish of its pods'
//     volumes (WaitForAllPodsUnmount) until the group's grace runs out.
//  3. It releases the lock and systemd powers the machine off. Nothing
//     makes the kubelet post its node status once more before it is
//     stopped: volumesInUse, reported with the periodic status update
//     (nodeStatusUpdateFrequency, 10 s by default), usually still lists
//     the volumes it just unmounted. The attach/detach controller then
//     waits for them (6 minutes, or an out-of-service taint) before it
//     detaches. ShutdownConfig.ReportReleased plays the luckier shutdown
//     whose last status update made it out.
//
// A pod whose containers outlive their group's grace is SIGKILLed at the
// end of it, and the kubelet gives up at the same moment: the stand-in
// plays the power-off winning that race, so such a pod stays Running in
// the API with its volumes published and in use.

// ShutdownConfig is a kubelet's graceful node shutdown configuration and
// how the node's workload takes a SIGTERM.
type ShutdownConfig struct {
	// GracePeriod is KubeletConfiguration's shutdownGracePeriod: how long
	// the kubelet holds the shutdown back in all. Zero turns graceful node
	// shutdown off (the kubelet default): the machine powers off with its
	// pods running, and nothing is posted.
	GracePeriod time.Duration
	// GracePeriodCriticalPods is shutdownGracePeriodCriticalPods: the part
	// of GracePeriod reserved for pods of priority system-cluster-critical
	// and above. Larger than GracePeriod turns the feature off, as in the
	// kubelet. Both are used in whole seconds, as the kubelet does.
	GracePeriodCriticalPods time.Duration
	// StopTime is how long the containers take to exit after SIGTERM (0:
	// at once). One that is still running at its pod's grace is SIGKILLed.
	StopTime time.Duration
	// ReportReleased makes a node status update land between the clean-up
	// of the killed pods' volumes and the power-off, so that volumesInUse
	// no longer lists them when the node goes (a status update period
	// shorter than that gap, or luck). Off, the report made before the
	// shutdown stands, as it usually does with the kubelet's defaults.
	ReportReleased bool
}

// ShutdownReport is what a Shutdown did.
type ShutdownReport struct {
	// Started is when the kubelet posted its node shutting down (zero when
	// graceful node shutdown is off).
	Started time.Time
	// Pods are the pods it killed, group by group.
	Pods []ShutdownPod
	// Rejected are the pods it refused to admit meanwhile.
	Rejected []types.NamespacedName
	// Released is when it released its inhibitor lock: every group done,
	// or out of time.
	Released time.Time
	// PoweredOff is when the node lost its power.
	PoweredOff time.Time
}

// ShutdownPod is what the shutdown did to one pod.
type ShutdownPod struct {
	Pod types.NamespacedName
	// Grace is the grace period the kubelet gave it.
	Grace time.Duration
	// Stopped is when its containers stopped within its group's grace;
	// zero if they outlived it (SIGKILLed as the kubelet gave up) and
	// nothing more was reported.
	Stopped time.Time
	// Killed is true if its containers were SIGKILLed at Grace instead of
	// exiting on SIGTERM.
	Killed bool
	// Unmounted is true if every volume of the pod was unpublished before
	// its group's grace ran out.
	Unmounted bool
}

// Messages and reasons of the kubelet's node shutdown manager.
const (
	// ShutdownReadyMessage is the Ready condition's message (reason
	// KubeletNotReady) of a node whose kubelet is shutting down.
	ShutdownReadyMessage = "node is shutting down"
	// ShutdownPodReason and ShutdownPodMessage are a killed pod's status
	// reason and message, and ShutdownPodMessage its DisruptionTarget
	// condition's message.
	ShutdownPodReason  = "Terminated"
	ShutdownPodMessage = "Pod was terminated in response to imminent node shutdown."
	// ShutdownRejectReason and ShutdownRejectMessage are the status of a
	// pod rejected during a shutdown (the kubelet prefixes the admission
	// message with "Pod was rejected: ").
	ShutdownRejectReason  = "NodeShutdown"
	ShutdownRejectMessage = "Pod was rejected: Pod was rejected as the node is shutting down."
	// ShutdownEventReason is the reason of the Normal Event on the Node.
	ShutdownEventReason = "Shutdown"
)

// systemCriticalPriority is system-cluster-critical's priority: pods at or
// above it are killed in the critical group.
const systemCriticalPriority int32 = 2_000_000_000

// reportReleasedTimeout bounds the wait for the status update of
// ShutdownConfig.ReportReleased: one default status update period.
const reportReleasedTimeout = 10 * time.Second

// shutdownState is a shutdown in progress, guarded by Kubelet.mu.
type shutdownState struct {
	cfg ShutdownConfig
	// admitted are the pods active when the shutdown began: killed, not
	// rejected.
	admitted map[types.UID]bool
	// rejected are the pods refused since.
	rejected map[types.UID]bool
	// released are the volumes of the pods reported stopped, which the
	// volume manager cleans up.
	released []volKey
	report   ShutdownReport
}

// shutdownGroup is one priority group of a shutdown.
type shutdownGroup struct {
	grace time.Duration
	pods  []*corev1.Pod
}

// shutdownGroups sorts pods into the kubelet's two groups: pods below
// system-cluster-critical get GracePeriod minus GracePeriodCriticalPods and
// go first, critical ones get GracePeriodCriticalPods; both in whole
// seconds. It returns nil when graceful node shutdown is off: GracePeriod
// under a second, or the critical part larger than the whole.
func shutdownGroups(cfg ShutdownConfig, pods []*corev1.Pod) []shutdownGroup {
	whole, critical := cfg.GracePeriod.Truncate(time.Second), cfg.GracePeriodCriticalPods.Truncate(time.Second)
	if whole <= 0 || critical < 0 || critical > whole {
		return nil
	}
	groups := []shutdownGroup{{grace: whole - critical}, {grace: critical}}
	for _, p := range pods {
		i := 0
		if p.Spec.Priority != nil && *p.Spec.Priority >= systemCriticalPriority {
			i = 1
		}
		groups[i].pods = append(groups[i].pods, p)
	}
	return groups
}

// podGrace is the grace the kubelet gives pod in a group of groupGrace:
// the pod's own terminationGracePeriodSeconds when shorter.
func podGrace(pod *corev1.Pod, groupGrace time.Duration) time.Duration {
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil && time.Duration(*s)*time.Second <= groupGrace {
		return time.Duration(*s) * time.Second
	}
	return groupGrace
}

// stopPlan says when, after SIGTERM, the containers of a pod with grace
// stop, given their stop time: at stopTime, or SIGKILLed (killed) at
// grace. inTime is false when that is not before the group's grace ends:
// the kubelet gives up then, and reports nothing more of the pod.
func stopPlan(stopTime, grace, groupGrace time.Duration) (after time.Duration, killed, inTime bool) {
	after, killed = stopTime, false
	if stopTime >= grace {
		after, killed = grace, true
	}
	return after, killed, after < groupGrace
}

// Shutdown shuts the node down gracefully, as `systemctl poweroff` does
// on a node whose kubelet has graceful node shutdown configured (see the
// comment at the top of this file), then powers it off: writers the
// kubelet did not stop go on only with Config.ZombieWrites, as after
// PowerOff. The caller must have taken the node's status and Lease from
// whoever else posts them (KWOK): the stand-in is the node's kubelet until
// the power-off. PowerOn boots the node again.
func (k *Kubelet) Shutdown(ctx context.Context, cfg ShutdownConfig) (ShutdownReport, error) {
	logger := klog.FromContext(k.baseCtx)
	k.mu.Lock()
	switch {
	case k.stopped:
		k.mu.Unlock()
		return ShutdownReport{}, errors.New("kubelet stand-in stopped")
	case !k.powered:
		k.mu.Unlock()
		return ShutdownReport{}, fmt.Errorf("kubelet stand-in %s: Shutdown of a node that is off or partitioned", k.cfg.NodeName)
	case k.shutdown != nil:
		k.mu.Unlock()
		return ShutdownReport{}, fmt.Errorf("kubelet stand-in %s: already shutting down", k.cfg.NodeName)
	}
	apiCtx := k.apiCtx
	k.mu.Unlock()
	// The shutdown ends with the power, or with the caller.
	sctx, cancel := context.WithCancel(apiCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()

	if shutdownGroups(cfg, nil) == nil {
		// No inhibitor lock: systemd powers off at once.
		logger.Info("Kubelet stand-in shutting down without graceful node shutdown")
		k.PowerOff()
		return ShutdownReport{PoweredOff: time.Now()}, nil
	}
	list, err := k.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(sctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String(),
	})
	if err != nil {
		return ShutdownReport{}, fmt.Errorf("kubelet stand-in %s: listing the node's pods: %w", k.cfg.NodeName, err)
	}
	var active []*corev1.Pod
	sd := &shutdownState{cfg: cfg, admitted: map[types.UID]bool{}, rejected: map[types.UID]bool{}}
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			active = append(active, p)
			sd.admitted[p.UID] = true
		}
	}
	k.mu.Lock()
	k.shutdown = sd
	k.mu.Unlock()

	if err := k.postShuttingDown(sctx); err != nil {
		return k.shutdownReport(), err
	}
	started := time.Now()
	k.mu.Lock()
	sd.report.Started = started
	k.mu.Unlock()
	k.recordNodeEvent(sctx, "Shutdown manager detected shutdown event")
	logger.Info("Kubelet stand-in shutting down gracefully", "gracePeriod", cfg.GracePeriod, "gracePeriodCriticalPods", cfg.GracePeriodCriticalPods, "pods", len(active))
	var renewals sync.WaitGroup
	renewals.Go(func() { k.renewWhileShuttingDown(sctx) })
	defer renewals.Wait()

	for _, g := range shutdownGroups(cfg, active) {
		if len(g.pods) == 0 {
			continue // an empty group is not waited for
		}
		start := time.Now()
		deadline := start.Add(g.grace)
		out := make([]ShutdownPod, len(g.pods))
		var wg sync.WaitGroup
		for i, p := range g.pods {
			wg.Go(func() { out[i] = k.killPod(sctx, p, cfg.StopTime, g.grace, start, deadline) })
		}
		wg.Wait()
		k.mu.Lock()
		sd.report.Pods = append(sd.report.Pods, out...)
		k.mu.Unlock()
		if sctx.Err() != nil {
			break
		}
	}
	released := time.Now()
	k.mu.Lock()
	sd.report.Released = released
	k.mu.Unlock()
	logger.Info("Kubelet stand-in released its shutdown inhibitor lock")
	if cfg.ReportReleased {
		k.waitReleasedReported(sctx)
	}
	if sctx.Err() != nil && ctx.Err() == nil {
		return k.shutdownReport(), fmt.Errorf("kubelet stand-in %s lost its power during its shutdown", k.cfg.NodeName)
	}
	cancel() // the renewals end before the power does
	renewals.Wait()
	k.PowerOff()
	k.mu.Lock()
	sd.report.PoweredOff = time.Now()
	k.mu.Unlock()
	return k.shutdownReport(), ctx.Err()
}

// shutdownReport returns a copy of the current shutdown's report.
func (k *Kubelet) shutdownReport() ShutdownReport {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shutdown == nil {
		return ShutdownReport{}
	}
	r := k.shutdown.report
	r.Pods = slices.Clone(r.Pods)
	r.Rejected = slices.Clone(r.Rejected)
	return r
}

// ShuttingDown reports whether the node is shutting down or was shut down
// and not powered on since.
func (k *Kubelet) ShuttingDown() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.shutdown != nil
}

// killPod kills one pod, whose containers take stopTime to exit, of a
// group that started at start and ends at deadline, and waits for the
// unpublish of its volumes until then.
func (k *Kubelet) killPod(ctx context.Context, pod *corev1.Pod, stopTime, groupGrace time.Duration, start, deadline time.Time) ShutdownPod {
	logger := klog.FromContext(k.baseCtx).WithValues("pod", klog.KObj(pod))
	grace := podGrace(pod, groupGrace)
	res := ShutdownPod{Pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, Grace: grace}
	keys := k.podVolumeKeys(ctx, pod)
	after, killed, inTime := stopPlan(stopTime, grace, groupGrace)
	if !inTime {
		// SIGKILLed as the group runs out: the kubelet is already giving up.
		sleepUntil(ctx, deadline)
		k.stopPodWriters(keys)
		logger.Info("Kubelet stand-in gave up on a pod still stopping at the end of its shutdown grace", "grace", grace)
		return res
	}
	if !sleepUntil(ctx, start.Add(after)) {
		return res
	}
	k.stopPodWriters(keys)
	res.Stopped, res.Killed = time.Now(), killed
	if err := k.reportKilled(ctx, pod, killed); err != nil {
		logger.Error(err, "Kubelet stand-in could not report a pod killed by the shutdown")
		return res
	}
	k.mu.Lock()
	if k.shutdown != nil {
		k.shutdown.released = append(k.shutdown.released, keys...)
	}
	k.mu.Unlock()
	res.Unmounted = k.waitUnpublished(ctx, keys, deadline)
	if res.Unmounted {
		k.deleteIfDeleting(ctx, pod)
	}
	logger.Info("Kubelet stand-in killed a pod for the shutdown", "grace", grace, "killed", killed, "unmounted", res.Unmounted)
	return res
}

// sleepUntil waits until t; it returns false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// podVolumeKeys resolves the pod's claims to the node's CSI volumes, from
// the API; a claim or volume it cannot read is left out.
func (k *Kubelet) podVolumeKeys(ctx context.Context, pod *corev1.Pod) []volKey {
	var out []volKey
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := k.cfg.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, vol.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			continue
		}
		pv, err := k.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.CSI == nil || k.drivers[pv.Spec.CSI.Driver] == nil {
			continue
		}
		out = append(out, volKey{driver: pv.Spec.CSI.Driver, handle: pv.Spec.CSI.VolumeHandle})
	}
	return out
}

// stopPodWriters stops the writers of a pod whose containers stopped; a
// volume held open from outside the pod (Config.HeldOpen) keeps its
// writer until its unpublish.
func (k *Kubelet) stopPodWriters(keys []volKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cfg.HeldOpen {
		return
	}
	for _, key := range keys {
		if v := k.vols[key]; v != nil {
			k.stopWriterLocked(v)
		}
	}
}

// reportKilled reports a pod whose containers the shutdown stopped, as the
// kubelet's status manager does once none may run: Failed, with the
// shutdown's reason and message and DisruptionTarget.
func (k *Kubelet) reportKilled(ctx context.Context, pod *corev1.Pod, killed bool) error {
	return k.updatePodStatus(ctx, pod, func(cur *corev1.Pod) {
		killedStatus(&cur.Status, cur.Spec.Containers, killed, time.Now())
	})
}

// updatePodStatus sets the status of pod with set, retrying on conflicts;
// a pod gone, or replaced by one of another UID, is left alone.
func (k *Kubelet) updatePodStatus(ctx context.Context, pod *corev1.Pod, set func(cur *corev1.Pod)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != pod.UID) {
			return nil
		}
		if err != nil {
			return err
		}
		set(cur)
		_, err = k.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// killedStatus turns st into the status of a pod the shutdown killed at
// now: exit code 0 for containers that exited on SIGTERM, 137 for those
// SIGKILLed.
func killedStatus(st *corev1.PodStatus, containers []corev1.Container, killed bool, now time.Time) {
	ts := metav1.NewTime(now)
	if st.Phase != corev1.PodSucceeded {
		st.Phase = corev1.PodFailed
	}
	st.Reason, st.Message = ShutdownPodReason, ShutdownPodMessage
	setPodCondition(st, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonTerminationByKubelet, Message: ShutdownPodMessage, LastTransitionTime: ts})
	for _, typ := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(st, corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, Reason: "PodFailed", LastTransitionTime: ts})
	}
	term := corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: ts}
	if killed {
		term.ExitCode, term.Reason = 137, "Error"
	}
	statuses := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		if i := slices.IndexFunc(st.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == c.Name }); i >= 0 {
			cs = st.ContainerStatuses[i]
		}
		t := term
		if cs.State.Running != nil {
			t.StartedAt = cs.State.Running.StartedAt
		}
		cs.State, cs.Ready, cs.Started = corev1.ContainerState{Terminated: &t}, false, ptr.To(false)
		statuses = append(statuses, cs)
	}
	st.ContainerStatuses = statuses
}

// setPodCondition replaces the condition of c's type, keeping its
// transition time when its status does not change, or appends c.
func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	i := slices.IndexFunc(st.Conditions, func(o corev1.PodCondition) bool { return o.Type == c.Type })
	if i < 0 {
		st.Conditions = append(st.Conditions, c)
		return
	}
	if st.Conditions[i].Status == c.Status {
		c.LastTransitionTime = st.Conditions[i].LastTransitionTime
	}
	st.Conditions[i] = c
}

// waitUnpublished waits until every one of keys is unpublished (or gone),
// as the kubelet's WaitForAllPodsUnmount does, until deadline.
func (k *Kubelet) waitUnpublished(ctx context.Context, keys []volKey, deadline time.Time) bool {
	done := func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, key := range keys {
			if v := k.vols[key]; v != nil && !v.unpublished {
				return false
			}
		}
		return true
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return wait.PollUntilContextCancel(dctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return done(), nil }) == nil
}

// deleteIfDeleting removes the object of a killed pod that was marked for
// deletion, as the kubelet does once it is terminal and its volumes are
// unmounted (grace 0, with its UID as precondition).
func (k *Kubelet) deleteIfDeleting(ctx context.Context, pod *corev1.Pod) {
	cur, err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp == nil {
		return
	}
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	if err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Kubelet stand-in could not delete a pod it killed", "pod", klog.KObj(pod))
	}
}

// waitReleasedReported waits, for ShutdownConfig.ReportReleased, until
// the volumes of the pods the shutdown stopped are cleaned up and
// volumesInUse as reported no longer lists them, at most
// reportReleasedTimeout.
func (k *Kubelet) waitReleasedReported(ctx context.Context) {
	reported := func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, key := range k.shutdown.released {
			if k.vols[key] != nil || slices.Contains(k.inUse, string(nodeutil.CSIUniqueVolumeName(key.driver, key.handle))) {
				return false
			}
		}
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, reportReleasedTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(wctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return reported(), nil }); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Info("Kubelet stand-in powering off before its last status update", "err", err)
	}
}
