{{- define "aclgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "aclgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "aclgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The last broker port: first + count - 1. */}}
{{- define "aclgate.lastBrokerPort" -}}
{{- sub (add (int .Values.brokerPorts.first) (int .Values.brokerPorts.count)) 1 -}}
{{- end -}}

{{/* --workers: .Values.workers, else the CPU limit rounded up ("1500m" -> 2, "2" -> 2), at least 1. */}}
{{- define "aclgate.workers" -}}
{{- if .Values.workers -}}
{{- .Values.workers -}}
{{- else -}}
{{- $cpu := "" -}}
{{- with .Values.resources -}}{{- with .limits -}}{{- with .cpu -}}{{- $cpu = toString . -}}{{- end -}}{{- end -}}{{- end -}}
{{- if not $cpu -}}
1
{{- else if hasSuffix "m" $cpu -}}
{{- max 1 (div (add (int (trimSuffix "m" $cpu)) 999) 1000) -}}
{{- else -}}
{{- max 1 (ceil (float64 $cpu) | int) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* One TOML value: strings quoted, lists of them in brackets, numbers and booleans as they are. */}}
{{- define "aclgate.tomlValue" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "slice" . -}}
[{{- range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "aclgate.tomlValue" $v }}{{ end -}}]
{{- else if kindIs "map" . -}}
{ {{- $first := true -}}{{- range $k, $v := . }}{{ if not $first }}, {{ end }}{{ $first = false }}{{ toJson (toString $k) }} = {{ include "aclgate.tomlValue" $v }}{{ end -}} }
{{- else if kindIs "float64" . -}}
{{- if eq (float64 (int64 .)) . -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{- define "aclgate.secretName" -}}
{{- .Values.existingSecret | default (include "aclgate.fullname" .) -}}
{{- end -}}
