package cluster

import (
	"fmt"
	"strings"
	"time"
)

// PoweredLabel is the Node label KWOK selects the nodes it manages by. A
// node whose label is PoweredOn gets heartbeats, lease renewals and pod
// status from KWOK; removing the label is a power cut as the control plane
// sees it.
const (
	PoweredLabel = "kwok.fenceline.io/power"
	PoweredOn    = "on"
)

// VolumesMountedAnnotation gates KWOK's "pod is running" stage for pods that
// use PersistentVolumeClaims: a kubelet stand-in sets it to "true" once it
// has staged and published every volume of the pod, as a real kubelet would
// before starting containers. Pods without claims run at once. It gates the
// final deletion too: once a pod marked for deletion has stopped, the
// stand-in sets it to "false" when it has unpublished the pod's volumes,
// and only then does KWOK delete the pod, as a real kubelet removes a pod
// object only once its volumes are unmounted.
const VolumesMountedAnnotation = "kubelet.fenceline.io/volumes-mounted"

// InternalIPAnnotation, on a KWOK node, is the InternalIP KWOK reports for
// it; 127.0.0.1 without it. AddNodeWithIP sets it.
const InternalIPAnnotation = "kwok.fenceline.io/internal-ip"

// kwokConfig holds the KWOK stages: nodes become Ready when managed (also
// after a power cycle); a scheduled pod is admitted (Pending, containers
// being created, not Ready), then Running once its volumes are mounted (if
// it has claims); a pod marked for deletion stops (Succeeded, containers
// exited 0, as the real kubelet reports it over a fake runtime) and is
// removed once its volumes are unmounted. This is the real kubelet's pod
// status history, which the differential test of the stand-in compares.
var kwokConfig = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: fenceline-node-boot
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: "simulated by kwok"
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      - type: MemoryPressure
        status: "False"
        reason: KubeletHasSufficientMemory
        message: "simulated by kwok"
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      - type: DiskPressure
        status: "False"
        reason: KubeletHasNoDiskPressure
        message: "simulated by kwok"
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      - type: PIDPressure
        status: "False"
        reason: KubeletHasSufficientPID
        message: "simulated by kwok"
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      addresses:
      - address: {{ with .metadata.annotations }}{{ or (index . "kwok.fenceline.io/internal-ip") "127.0.0.1" | Quote }}{{ else }}"127.0.0.1"{{ end }}
        type: InternalIP
      - address: {{ .metadata.name | Quote }}
        type: Hostname
      allocatable:
        cpu: "32"
        memory: 64Gi
        pods: "110"
      capacity:
        cpu: "32"
        memory: 64Gi
        pods: "110"
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: v1.37.2
        containerRuntimeVersion: kwok
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: fenceline-node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
` + heartbeatDelay + `  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
      {{ end }}
` + podStage("fenceline-pod-admitted", `
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['False', 'True']`, podStatus(false, "ContainersNotReady", `
          waiting:
            reason: ContainerCreating`, `
      hostIP: "127.0.0.1"
      phase: Pending
      startTime: {{ $now | Quote }}`)) + podStage("fenceline-pod-running", `
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['False']
    - key: 'if ([.spec.volumes[]? | select(.persistentVolumeClaim != null)] | length) == 0 then "yes" elif .metadata.annotations["`+VolumesMountedAnnotation+`"] == "true" then "yes" else "no" end'
      operator: 'In'
      values: ['yes']`, podStatus(true, "", `
          running:
            startedAt: {{ $now | Quote }}`, `
      hostIP: "127.0.0.1"
      podIP: "127.0.0.1"
      phase: Running
      startTime: {{ $now | Quote }}`)) + podStage("fenceline-pod-stopped", `
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']`, podStatus(false, "PodCompleted", `
          terminated:
            exitCode: 0
            reason: Completed
            finishedAt: {{ $now | Quote }}`, `
      phase: Succeeded`)) + podStage("fenceline-pod-delete", `
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'NotIn'
      values: ['Running']
    - key: '.metadata.annotations["`+VolumesMountedAnnotation+`"]'
      operator: 'NotIn'
      values: ['true']`, `
    delete: true`)

// podStage is a KWOK Stage of pods: selected by the match expressions
// exprs, moved on by next (both YAML lines, each starting with a newline).
func podStage(name, exprs, next string) string {
	return `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ` + name + `
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:` + exprs + `
  next:` + next + "\n"
}

// podStatus is the status template of a pod stage: scheduled and
// initialized, its containers ready or not (for reason), each in
// containerState, followed by the status fields in rest (YAML lines, each
// starting with a newline).
func podStatus(ready bool, reason, containerState, rest string) string {
	cond := func(typ string) string {
		c := fmt.Sprintf(`
      - type: %s
        status: "%s"`, typ, map[bool]string{true: "True", false: "False"}[ready])
		if reason != "" {
			c += "\n        reason: " + reason
		}
		return c + `
        lastTransitionTime: {{ $now | Quote }}`
	}
	return `
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: PodScheduled
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}` + cond("ContainersReady") + cond("Ready") + `
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: ` + fmt.Sprint(ready) + `
        started: ` + fmt.Sprint(ready) + `
        restartCount: 0
        state:` + containerState + `
      {{ end }}` + rest
}

// heartbeatDelay is the delay of the node heartbeat stage in kwokConfig:
// a Ready node's status is posted again every 20-25 s.
const heartbeatDelay = `    durationMilliseconds: 20000
    jitterDurationMilliseconds: 25000
`

// kwokConfigFor returns kwokConfig with KWOK's parallelism set (0 keeps
// KWOK's default) and the node heartbeat stage posting a Ready node's
// status every statusInterval plus up to a tenth of it (0 keeps
// heartbeatDelay).
func kwokConfigFor(parallelism int, statusInterval time.Duration) string {
	cfg := kwokConfig
	if statusInterval > 0 {
		ms := statusInterval.Milliseconds()
		cfg = strings.Replace(cfg, heartbeatDelay, fmt.Sprintf("    durationMilliseconds: %d\n    jitterDurationMilliseconds: %d\n", ms, ms+ms/10), 1)
	}
	if parallelism > 0 {
		cfg = fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: %[1]d
  nodePlayStageParallelism: %[1]d
  podPlayStageParallelism: %[1]d
---
`, parallelism) + cfg
	}
	return cfg
}
