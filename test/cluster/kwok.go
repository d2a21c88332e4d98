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
// before starting containers. Pods without claims run at once.
const VolumesMountedAnnotation = "kubelet.fenceline.io/volumes-mounted"

// kwokConfig holds the KWOK stages: nodes become Ready when managed (also
// after a power cycle), pods become Running once scheduled (after their
// volumes are mounted, if they have claims), and pods marked for deletion
// are removed, as a kubelet would once containers stopped.
const kwokConfig = `apiVersion: kwok.x-k8s.io/v1alpha1
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
      - address: "127.0.0.1"
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
        kubeletVersion: v1.37.1
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
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: fenceline-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
    - key: 'if ([.spec.volumes[]? | select(.persistentVolumeClaim != null)] | length) == 0 then "yes" elif .metadata.annotations["` + VolumesMountedAnnotation + `"] == "true" then "yes" else "no" end'
      operator: 'In'
      values: ['yes']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: PodScheduled
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      hostIP: "127.0.0.1"
      podIP: "127.0.0.1"
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: fenceline-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
`

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
