{{/* Names, labels and the image reference shared by every template of the trainyard chart. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "trainyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The object name prefix: fullnameOverride, else "<release>-<name>", else just the release name when
it already contains the chart name. Cut to 63 characters because Service names are DNS labels.
*/}}
{{- define "trainyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<chart>-<version>" for the helm.sh/chart label ("+" is not allowed in label values). */}}
{{- define "trainyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the controller pods; they must never change between upgrades. */}}
{{- define "trainyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* Labels on every object. */}}
{{- define "trainyard.labels" -}}
helm.sh/chart: {{ include "trainyard.chart" . }}
{{ include "trainyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trainyard
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "trainyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference; a sha256 digest in image.tag is joined with "@". */}}
{{- define "trainyard.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if hasPrefix "sha256:" $tag }}
{{- printf "%s@%s" .Values.image.repository $tag }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}
