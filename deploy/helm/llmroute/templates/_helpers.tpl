{{/* Labels every object carries. */}}
{{- define "llmroute.labels" -}}
app.kubernetes.io/name: llmroute
app.kubernetes.io/part-of: llmroute
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The router pods' selector. */}}
{{- define "llmroute.selector" -}}
app.kubernetes.io/name: llmroute
app.kubernetes.io/component: router
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The router config, with Redis state when the release has one. */}}
{{- define "llmroute.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.redis.bundled -}}
{{- $_ := set $config "state" (dict "kind" "redis" "url" (printf "redis://%s-redis:6379/0" .Release.Name)) -}}
{{- else if .Values.redis.url -}}
{{- $_ := set $config "state" (dict "kind" "redis" "url" .Values.redis.url) -}}
{{- end -}}
{{ toYaml $config }}
{{- end }}

{{- define "llmroute.adminSecret" -}}
{{ .Values.existingAdminSecret | default (printf "%s-admin" .Release.Name) }}
{{- end }}
