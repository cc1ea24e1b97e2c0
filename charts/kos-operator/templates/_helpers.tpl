{{/* The objects' name: the release's (kos-operator when installed as such), or fullnameOverride. */}}
{{- define "kos-operator.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kos-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kos-operator.labels" -}}
{{ include "kos-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image, `repository:tag`; the tag defaults to the chart's appVersion. */}}
{{- define "kos-operator.image" -}}
{{- $repo := required "image.repository is required: kos publishes no kos-operator image (build one with scripts/image kos-operator, push it, and name its repository)" .Values.image.repository -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
