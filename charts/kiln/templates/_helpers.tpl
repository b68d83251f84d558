{{/* The name of everything the chart makes. */}}
{{- define "kiln.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kiln.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kiln.labels" -}}
{{ include "kiln.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kiln.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kiln.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the rules. */}}
{{- define "kiln.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "kiln.fullname" .)) .Values.rules.existingConfigMap -}}
{{- end -}}

{{/* No rule files given: kiln must be told that an empty set is expected. */}}
{{- define "kiln.noRules" -}}
{{- if and (not .Values.rules.existingConfigMap) (empty .Values.rules.files) -}}true{{- end -}}
{{- end -}}

{{- define "kiln.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
