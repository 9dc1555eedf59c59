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

{{- define "stasis.nodeImage" -}}
{{ .Values.stasisd.image.repository }}:{{ .Values.stasisd.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret holding the store's credentials: the user's, or the chart's. */}}
{{- define "stasis.storeSecret" -}}
{{- if .Values.store.existingSecret }}{{ .Values.store.existingSecret }}{{ else }}stasis-store{{ end -}}
{{- end }}

{{- define "stasis.storeSecretUsed" -}}
{{- if or .Values.store.existingSecret .Values.store.s3.accessKeyID .Values.store.gcs.keyJSON }}true{{ end -}}
{{- end }}

{{/* The store's credentials in a container that reads the store: the
Secret's keys as its environment (S3's), or its key file (GCS's), named by
GOOGLE_APPLICATION_CREDENTIALS. Each gives its items, or nothing. */}}
{{- define "stasis.storeEnvFrom" -}}
{{- if include "stasis.storeSecretUsed" . -}}
envFrom:
- secretRef: {name: {{ include "stasis.storeSecret" . }}}
{{- end }}
{{- end }}

{{- define "stasis.storeKeyFileUsed" -}}
{{- if and (include "stasis.storeSecretUsed" .) (hasPrefix "gs://" .Values.store.location) }}true{{ end -}}
{{- end }}

{{- define "stasis.storeKeyEnv" -}}
{{- if include "stasis.storeKeyFileUsed" . -}}
- {name: GOOGLE_APPLICATION_CREDENTIALS, value: /var/run/secrets/stasis-store/key.json}
{{- end }}
{{- end }}

{{- define "stasis.storeKeyMount" -}}
{{- if include "stasis.storeKeyFileUsed" . -}}
- {name: store, mountPath: /var/run/secrets/stasis-store, readOnly: true}
{{- end }}
{{- end }}

{{- define "stasis.storeKeyVolume" -}}
{{- if include "stasis.storeKeyFileUsed" . -}}
- name: store
  secret: {secretName: {{ include "stasis.storeSecret" . }}, items: [{key: key.json, path: key.json}]}
{{- end }}
{{- end }}
