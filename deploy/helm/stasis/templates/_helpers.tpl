{{/* The labels every object of the release carries. */}}
{{- define "stasis.labels" -}}
app.kubernetes.io/name: stasis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "stasis.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret holding the store's credentials: the user's, or the chart's. */}}
{{- define "stasis.storeSecret" -}}
{{- if .Values.store.existingSecret }}{{ .Values.store.existingSecret }}{{ else }}stasis-store{{ end -}}
{{- end }}

{{- define "stasis.storeSecretUsed" -}}
{{- if or .Values.store.existingSecret .Values.store.s3.accessKeyID .Values.store.gcs.keyJSON }}true{{ end -}}
{{- end }}
