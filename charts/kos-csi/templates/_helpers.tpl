{{/* The workloads' name prefix: the chart's, or nameOverride. */}}
{{- define "kos-csi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "kos-csi.labels" -}}
app.kubernetes.io/name: {{ include "kos-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kos-csi.controllerplugin.matchLabels" -}}
app.kubernetes.io/name: {{ include "kos-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controllerplugin
{{- end -}}

{{- define "kos-csi.nodeplugin.matchLabels" -}}
app.kubernetes.io/name: {{ include "kos-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nodeplugin
{{- end -}}

{{- define "kos-csi.image" -}}
{{- $repo := required "csi.plugin.image.repository is required: kos publishes no kos-csi image; build it with scripts/image kos-csi and push it (docs/storage.md)" .Values.csi.plugin.image.repository -}}
{{- printf "%s:%s" $repo (.Values.csi.plugin.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}

{{/* A sidecar's image. */}}
{{- define "kos-csi.sidecarImage" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}

{{/* `-v=N` when logVerbosityLevel is set. */}}
{{- define "kos-csi.verbosity" -}}
{{- if not (kindIs "invalid" .Values.logVerbosityLevel) }}
- -v={{ .Values.logVerbosityLevel }}
{{- end }}
{{- end -}}

{{/* A templated extraArgs string as list items, or nothing. Args: (list $ string). */}}
{{- define "kos-csi.extraArgs" -}}
{{- $root := index . 0 -}}
{{- with index . 1 }}
{{ tpl . $root | trim }}
{{- end }}
{{- end -}}

{{- define "kos-csi.secretVolume" -}}
{{- if .Values.secret.enabled }}
- name: cloud-config
  secret:
    secretName: {{ required "secret.name is required when secret.enabled" .Values.secret.name }}
{{- else if .Values.secret.hostMount }}
- name: cloud-config
  hostPath:
    path: /etc/config
    type: Directory
{{- end }}
{{- end -}}

{{/* The StorageClass objects: one per entry of a list of dicts. */}}
{{- define "kos-csi.storageClass" -}}
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {{ required "storageClass: every class needs a name" .name }}
  labels:
    {{- include "kos-csi.labels" .root | nindent 4 }}
  {{- if .isDefault }}
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
  {{- end }}
provisioner: cinder.csi.openstack.org
reclaimPolicy: {{ .reclaimPolicy | default "Delete" }}
allowVolumeExpansion: {{ if kindIs "invalid" .allowVolumeExpansion }}true{{ else }}{{ .allowVolumeExpansion }}{{ end }}
volumeBindingMode: {{ .volumeBindingMode | default .root.Values.storageClass.volumeBindingMode | default "WaitForFirstConsumer" }}
{{- with .parameters }}
parameters:
  {{- range $k, $v := . }}
  {{ $k }}: {{ toString $v | quote }}
  {{- end }}
{{- end }}
{{- end -}}
