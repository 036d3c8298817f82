{{/* Names, labels and the parts every driftguard pod shares. */}}

{{- define "driftguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "driftguard.fullname" -}}
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

{{- define "driftguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "driftguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: driftguard
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "ingest"). */}}
{{- define "driftguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "driftguard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "driftguard.componentLabels" -}}
{{ include "driftguard.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "driftguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "driftguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "driftguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The config file and the schemas next to it: the data of both ConfigMaps. */}}
{{- define "driftguard.configData" -}}
config.yaml: |
{{ toYaml .Values.config | indent 2 }}
{{- range $file, $schema := .Values.schemas }}
{{ $file }}: |
{{ $schema | indent 2 }}
{{- end }}
{{- end -}}

{{/* Fails the render when a stream of config.streams has no webhook secret,
or when two processor groups share a stream. */}}
{{- define "driftguard.check" -}}
{{- range $stream, $_ := (.Values.config.streams | default dict) }}
{{- if not (hasKey $.Values.webhookSecrets $stream) }}
{{- fail (printf "config.streams.%s has no webhook secret: add webhookSecrets.%s (ingest refuses to start without one)" $stream $stream) }}
{{- end }}
{{- end }}
{{- $seen := dict }}
{{- $groups := dict }}
{{- range .Values.processors.groups }}
{{- if hasKey $groups .name }}
{{- fail (printf "processors.groups: the group name %q appears twice" .name) }}
{{- end }}
{{- $_ := set $groups .name true }}
{{- if and (not .streams) (gt (len $.Values.processors.groups) 1) }}
{{- fail (printf "processors.groups: group %q runs every stream (no streams), so it overlaps the other groups" .name) }}
{{- end }}
{{- range .streams }}
{{- if hasKey $seen . }}
{{- fail (printf "processors.groups: stream %q is in two groups" .) }}
{{- end }}
{{- $_ := set $seen . true }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The container securityContext of every container: the image runs as
65532 with nothing writable but /tmp and the data dir. */}}
{{- define "driftguard.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "driftguard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Variables every component reads. */}}
{{- define "driftguard.env" -}}
- name: DRIFTGUARD_CONFIG
  value: /etc/driftguard/config.yaml
- name: DRIFTGUARD_KAFKA_BROKERS
  value: {{ join "," .Values.kafka.brokers | quote }}
- name: DRIFTGUARD_CLICKHOUSE_ADDR
  value: {{ .Values.clickhouse.addr | quote }}
- name: DRIFTGUARD_CLICKHOUSE_DATABASE
  value: {{ .Values.clickhouse.database | quote }}
- name: DRIFTGUARD_DATA_DIR
  value: /var/lib/driftguard
- name: DRIFTGUARD_TELEMETRY_ADDR
  value: ":9464"
{{- if .Values.pyroscope.addr }}
- name: DRIFTGUARD_PYROSCOPE_ADDR
  value: {{ .Values.pyroscope.addr | quote }}
{{- end }}
{{- end -}}

{{- define "driftguard.clickhousePasswordEnv" -}}
{{- if .Values.clickhouse.passwordSecret.name }}
- name: DRIFTGUARD_CLICKHOUSE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.clickhouse.passwordSecret.name }}
      key: {{ .Values.clickhouse.passwordSecret.key }}
{{- end }}
{{- end -}}

{{/* Liveness on /healthz, readiness on /readyz, on the named port. */}}
{{- define "driftguard.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ . }}
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 3
{{- end -}}

{{- define "driftguard.configMounts" -}}
- name: config
  mountPath: /etc/driftguard
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "driftguard.configVolumes" -}}
- name: config
  configMap:
    name: {{ include "driftguard.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Pod-level settings shared by every workload:
(dict "root" $ "component" "ingest" "values" .Values.ingest "selector" extra-labels). */}}
{{- define "driftguard.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "driftguard.serviceAccountName" $root }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
securityContext:
  {{- include "driftguard.podSecurityContext" $root | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.nodeSelector | default $root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.tolerations | default $root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if $root.Values.podAntiAffinityWeight }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: {{ $root.Values.podAntiAffinityWeight }}
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "driftguard.selectorLabels" . | nindent 14 }}
              {{- with (get . "selector") }}
              {{- toYaml . | nindent 14 }}
              {{- end }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: labels and the config checksum that rolls pods
when the config or the catalogue changes. */}}
{{- define "driftguard.podMetadata" -}}
labels:
  {{- include "driftguard.selectorLabels" . | nindent 2 }}
  {{- with (get . "selector") }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* A container of the setup hook Job: (dict "root" $ "command" "topics"). */}}
{{- define "driftguard.hookContainer" -}}
{{- $root := .root -}}
- name: {{ .command }}
  image: {{ include "driftguard.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args: [{{ .command }}]
  env:
    {{- include "driftguard.env" $root | nindent 4 }}
    {{- if eq .command "migrate" }}
    {{- include "driftguard.clickhousePasswordEnv" $root | nindent 4 }}
    {{- end }}
  resources:
    {{- toYaml $root.Values.hooks.resources | nindent 4 }}
  securityContext:
    {{- include "driftguard.containerSecurityContext" $root | nindent 4 }}
  volumeMounts:
    {{- include "driftguard.configMounts" $root | nindent 4 }}
{{- end -}}
