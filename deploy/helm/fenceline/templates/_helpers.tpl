{{/*
The labels every object carries. Takes a dict: root (the top-level
context) and name (the component, e.g. fenceline-controller).
*/}}
{{- define "fenceline.labels" -}}
{{ include "fenceline.selectorLabels" .name }}
app.kubernetes.io/part-of: fenceline
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
Selector labels: the component's name only, as in the kustomize bases, so
that a Deployment installed with kustomize can be taken over by the chart
(a Deployment's selector cannot change).
*/}}
{{- define "fenceline.selectorLabels" -}}
app.kubernetes.io/name: {{ . }}
{{- end -}}

{{/*
The image of a component: registry/repository:tag. Takes a dict: root and
repository.
*/}}
{{- define "fenceline.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- with .root.Values.image.registry -}}{{ trimSuffix "/" . }}/{{- end -}}
{{ .repository }}:{{ $tag }}
{{- end -}}

{{/*
The two workloads of the chart, as a list of dicts: name (object and
container name), values (their section of the values) and args (the
component's own flags; leader election and the HTTP endpoint are added for
both). The Deployment, PodDisruptionBudget, Service and ServiceMonitor
templates all range over it, so the components differ only here.
*/}}
{{- define "fenceline.components" -}}
{{- $ns := .Release.Namespace -}}
{{- $c := .Values.controller -}}
{{- $f := .Values.fenceAgent -}}
- name: fenceline-controller
  values: {{ toJson $c }}
  args:
    - --controllers={{ $c.controllers }}
    - --leader-election
    - --leader-election-namespace={{ $ns }}
    - --quarantine-delay={{ $c.quarantineDelay }}
- name: fenceline-fence-agent
  values: {{ toJson $f }}
  args:
    - --leader-election
    - --leader-election-namespace={{ $ns }}
    - --credentials-namespace={{ $ns }}
    - --probe-interval={{ $f.probeInterval }}
{{- end -}}

{{/*
The three rules fenced detach needs beyond upstream external-attacher's
RBAC (docs/migration.md): Nodes (is the node down?), CSIDrivers (the
fenceline.io/safe-detach opt-in) and Events on VolumeAttachments
(cluster-scoped objects, so their Events go to the default namespace);
and the StorageFences a driver that lists its fences publishes them in.
*/}}
{{- define "fenceline.attacherFencingRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["csidrivers"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["fenceline.io"]
  resources: ["storagefences"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
- apiGroups: ["fenceline.io"]
  resources: ["storagefences/status"]
  verbs: ["update"]
{{- end -}}

{{/*
The project's repository, whose docs/runbooks.md the alerts link to (the
images' org.opencontainers.image.source too).
*/}}
{{- define "fenceline.repository" -}}
https://fenceline.io/fenceline
{{- end -}}
