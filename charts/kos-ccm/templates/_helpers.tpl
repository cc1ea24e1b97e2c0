{{/* The workload's name: the chart's, or nameOverride. */}}
{{- define "kos-ccm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kos-ccm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kos-ccm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kos-ccm.labels" -}}
{{ include "kos-ccm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/*
One cloud.conf value as gcfg reads it: always double-quoted, with the only escapes gcfg knows
(\\ \" \n \t), so `;`, `#`, quotes and backslashes in a secret are kept. Sprig's `quote` would
write Go escapes (\x00, \u...) that gcfg refuses.
*/}}
{{- define "kos-ccm.gcfgValue" -}}
{{- $v := toString . | replace `\` `\\` | replace `"` `\"` | replace "\n" `\n` | replace "\t" `\t` -}}
{{- printf "\"%s\"" $v -}}
{{- end -}}

{{/* One [Section] of cloud.conf from a map of key = value; keys as gcfg names them. */}}
{{- define "kos-ccm.gcfgSection" -}}
{{- $section := index . 0 -}}
{{- $values := index . 1 -}}
[{{ $section }}]
{{- range $key, $value := $values }}
{{- if not (regexMatch "^[A-Za-z][A-Za-z0-9-]*$" $key) }}
{{- fail (printf "cloudConfig: %q in [%s] is not a cloud.conf key (letters, digits and '-', e.g. auth-url)" $key $section) }}
{{- end }}
{{ $key }} = {{ include "kos-ccm.gcfgValue" $value }}
{{- end }}
{{- end -}}

{{/* The cloud.conf the chart's Secret holds. */}}
{{- define "kos-ccm.cloudConfig" -}}
{{- if .Values.cloudConfigContents -}}
{{ .Values.cloudConfigContents }}
{{- else -}}
{{- $c := .Values.cloudConfig | default dict -}}
{{- if not (index ($c.global | default dict) "auth-url") -}}
{{- fail "cloudConfig.global.auth-url is required when the chart makes the cloud.conf Secret (secret.create); or set secret.create=false and name an existing Secret in secret.name" -}}
{{- end -}}
{{ include "kos-ccm.gcfgSection" (list "Global" $c.global) }}
{{- range $section, $key := dict "Networking" "networking" "LoadBalancer" "loadBalancer" "BlockStorage" "blockStorage" "Metadata" "metadata" "Route" "route" }}
{{- with index $c $key }}

{{ include "kos-ccm.gcfgSection" (list $section .) }}
{{- end }}
{{- end }}
{{- end }}
{{ end -}}

{{- define "kos-ccm.image" -}}
{{- $repo := required "image.repository is required: kos publishes no kos-ccm image; build it with scripts/image kos-ccm and push it (docs/ccm.md)" .Values.image.repository -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
