{{/* The name of every object of a release. */}}
{{- define "tessera.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "tessera.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The labels that select the serving pods. */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* The ConfigMap holding tessera.yaml. */}}
{{- define "tessera.configMap" -}}
{{- .Values.existingConfigMap | default (include "tessera.fullname" .) -}}
{{- end -}}

{{/* The image, its tag defaulting to the chart's appVersion. */}}
{{- define "tessera.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* env and envFrom of every tessera container. */}}
{{- define "tessera.env" -}}
{{- if or .Values.env .Values.secretEnv -}}
env:
{{- range $name, $value := .Values.env }}
  - name: {{ $name }}
    value: {{ $value | toString | quote }}
{{- end }}
{{- range $name, $ref := .Values.secretEnv }}
  - name: {{ $name }}
    valueFrom:
      secretKeyRef:
        name: {{ required (printf "secretEnv.%s.secret is required" $name) $ref.secret }}
        key: {{ required (printf "secretEnv.%s.key is required" $name) $ref.key }}
{{- end }}
{{- end }}
{{- with .Values.envFromSecrets }}
{{- if or $.Values.env $.Values.secretEnv }}{{ "\n" }}{{ end -}}
envFrom:
{{- range . }}
  - secretRef: { name: {{ . }} }
{{- end }}
{{- end }}
{{- end -}}

{{/* Volumes of every tessera pod: the configuration, scratch, data. */}}
{{- define "tessera.volumes" -}}
volumes:
  - name: config
    configMap: { name: {{ include "tessera.configMap" . }} }
  - name: scratch
    emptyDir: { sizeLimit: {{ .Values.scratch.sizeLimit }} }
  - name: tmp
    emptyDir: {}
{{- if .Values.data.existingClaim }}
  - name: data
    persistentVolumeClaim: { claimName: {{ .Values.data.existingClaim }}, readOnly: true }
{{- end }}
{{- end -}}

{{/* The mounts matching tessera.volumes. */}}
{{- define "tessera.volumeMounts" -}}
volumeMounts:
  - { name: config, mountPath: /etc/tessera, readOnly: true }
  - { name: scratch, mountPath: {{ .Values.scratch.mountPath }} }
  - { name: tmp, mountPath: /tmp }
{{- if .Values.data.existingClaim }}
  - { name: data, mountPath: {{ .Values.data.mountPath }}, readOnly: true }
{{- end }}
{{- end -}}
