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
when two processor groups share a stream, or when a preStop drain would
take the whole grace period. */}}
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
{{- range $name := list "ingest" "bridge" }}
{{- $v := index $.Values $name }}
{{- if and $v.enabled (ge (int $v.preStopSleepSeconds) (int $.Values.terminationGracePeriodSeconds)) }}
{{- fail (printf "%s.preStopSleepSeconds (%v) must stay below terminationGracePeriodSeconds (%v): the drain is part of the grace period, and the process needs the rest to finish its requests" $name $v.preStopSleepSeconds $.Values.terminationGracePeriodSeconds) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The securityContexts: the image runs as 65532 with nothing writable but
/tmp and the data dir. Both are values, so OpenShift users can null the ids
(its restricted SCC assigns them). */}}
{{- define "driftguard.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end -}}

{{- define "driftguard.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end -}}

{{/* Variables every component reads: the pod's identity from the downward
API, Kafka (brokers, naming, TLS, SASL), ClickHouse's address, the local
listeners and profiling. */}}
{{- define "driftguard.env" -}}
- name: DRIFTGUARD_CONFIG
  value: /etc/driftguard/config.yaml
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: DRIFTGUARD_KAFKA_BROKERS
  value: {{ join "," .Values.kafka.brokers | quote }}
{{- with .Values.kafka.topicPrefix }}
- name: DRIFTGUARD_KAFKA_TOPIC_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kafka.groupPrefix }}
- name: DRIFTGUARD_KAFKA_GROUP_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- include "driftguard.tlsEnv" (dict "prefix" "KAFKA" "tls" .Values.kafka.tls "dir" "/var/run/secrets/driftguard/kafka") }}
{{- with .Values.kafka.sasl }}
{{- if .mechanism }}
- name: DRIFTGUARD_KAFKA_SASL_MECHANISM
  value: {{ .mechanism | quote }}
{{- with .username }}
- name: DRIFTGUARD_KAFKA_SASL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- include "driftguard.secretEnv" (dict "name" "DRIFTGUARD_KAFKA_SASL_PASSWORD" "ref" .passwordSecret) }}
{{- if .tokenSecret.name }}
- name: DRIFTGUARD_KAFKA_SASL_TOKEN_FILE
  value: /var/run/secrets/driftguard/kafka/token
{{- end }}
{{- end }}
{{- end }}
- name: DRIFTGUARD_CLICKHOUSE_ADDR
  value: {{ .Values.clickhouse.addr | quote }}
- name: DRIFTGUARD_CLICKHOUSE_DATABASE
  value: {{ .Values.clickhouse.database | quote }}
- name: DRIFTGUARD_DATA_DIR
  value: /var/lib/driftguard
- name: DRIFTGUARD_TELEMETRY_ADDR
  value: ":9464"
{{- include "driftguard.secretEnv" (dict "name" "DRIFTGUARD_ADMIN_TOKEN" "ref" .Values.admin.tokenSecret) }}
{{- with .Values.pyroscope }}
{{- if .addr }}
- name: DRIFTGUARD_PYROSCOPE_ADDR
  value: {{ .addr | quote }}
{{- with .tenantID }}
- name: DRIFTGUARD_PYROSCOPE_TENANT_ID
  value: {{ . | quote }}
{{- end }}
{{- with .basicAuth.username }}
- name: DRIFTGUARD_PYROSCOPE_BASIC_AUTH_USER
  value: {{ . | quote }}
{{- end }}
{{- include "driftguard.secretEnv" (dict "name" "DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD" "ref" .basicAuth.passwordSecret) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A variable from a key of an existing Secret, when the reference names
one: (dict "name" VAR "ref" (dict "name" secret "key" key)). */}}
{{- define "driftguard.secretEnv" -}}
{{- if .ref.name }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .ref.name }}
      key: {{ .ref.key }}
{{- end }}
{{- end -}}

{{/* The TLS variables of a client, naming the files driftguard.tlsSources
mounts: (dict "prefix" "KAFKA" "tls" .Values.kafka.tls "dir" path). */}}
{{- define "driftguard.tlsEnv" -}}
{{- if .tls.enabled }}
- name: DRIFTGUARD_{{ .prefix }}_TLS_ENABLED
  value: "true"
{{- if .tls.ca.secretName }}
- name: DRIFTGUARD_{{ .prefix }}_TLS_CA_FILE
  value: {{ .dir }}/ca.crt
{{- end }}
{{- if .tls.cert.secretName }}
- name: DRIFTGUARD_{{ .prefix }}_TLS_CERT_FILE
  value: {{ .dir }}/tls.crt
- name: DRIFTGUARD_{{ .prefix }}_TLS_KEY_FILE
  value: {{ .dir }}/tls.key
{{- end }}
{{- with .tls.serverName }}
- name: DRIFTGUARD_{{ $.prefix }}_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The projected-volume sources of a client's TLS files. The CA and the
client certificate may come from different Secrets (Strimzi keeps the
cluster CA apart from each user's certificate). */}}
{{- define "driftguard.tlsSources" -}}
{{- if .enabled }}
{{- if .ca.secretName }}
- secret:
    name: {{ .ca.secretName }}
    items:
      - {key: {{ .ca.key | quote }}, path: ca.crt}
{{- end }}
{{- if .cert.secretName }}
- secret:
    name: {{ .cert.secretName }}
    items:
      - {key: {{ .cert.certKey | quote }}, path: tls.crt}
      - {key: {{ .cert.keyKey | quote }}, path: tls.key}
{{- end }}
{{- end }}
{{- end -}}

{{/* Kafka's files: TLS, and the OAUTHBEARER token. */}}
{{- define "driftguard.kafkaSources" -}}
{{- include "driftguard.tlsSources" .Values.kafka.tls }}
{{- with .Values.kafka.sasl }}
{{- if and .mechanism .tokenSecret.name }}
- secret:
    name: {{ .tokenSecret.name }}
    items:
      - {key: {{ .tokenSecret.key | quote }}, path: token}
{{- end }}
{{- end }}
{{- end -}}

{{/* What the sink and migrate read besides: the ClickHouse user, password,
cluster and TLS. */}}
{{- define "driftguard.clickhouseEnv" -}}
{{- with .Values.clickhouse.username }}
- name: DRIFTGUARD_CLICKHOUSE_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- include "driftguard.secretEnv" (dict "name" "DRIFTGUARD_CLICKHOUSE_PASSWORD" "ref" .Values.clickhouse.passwordSecret) }}
{{- with .Values.clickhouse.cluster }}
- name: DRIFTGUARD_CLICKHOUSE_CLUSTER
  value: {{ . | quote }}
{{- end }}
{{- include "driftguard.tlsEnv" (dict "prefix" "CLICKHOUSE" "tls" .Values.clickhouse.tls "dir" "/var/run/secrets/driftguard/clickhouse") }}
{{- end -}}

{{/* envFrom of a driftguard container: the global list, then the
component's: (dict "root" $ "values" .Values.ingest). */}}
{{- define "driftguard.envFrom" -}}
{{- $all := concat (.root.Values.envFrom | default list) ((get ((get . "values") | default dict) "envFrom") | default list) }}
{{- with $all }}
envFrom:
  {{- toYaml . | nindent 2 }}
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

{{/* The preStop drain of a Service's pods (ingest, bridge): the pod leaves
the Service's endpoints as soon as it is terminating, but kube-proxy and
ingress controllers learn it a few seconds later; sleeping first keeps the
process answering what they still send. Kubernetes' own sleep action,
since the image has no shell. */}}
{{- define "driftguard.preStop" -}}
{{- if .preStopSleepSeconds }}
lifecycle:
  preStop:
    sleep:
      seconds: {{ .preStopSleepSeconds }}
{{- end }}
{{- end -}}

{{/* Mounts of a driftguard container: (dict "root" $ "values" component
values or nil "clickhouse" true when it talks to ClickHouse). */}}
{{- define "driftguard.mounts" -}}
- name: config
  mountPath: /etc/driftguard
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if include "driftguard.kafkaSources" .root }}
- name: kafka-secrets
  mountPath: /var/run/secrets/driftguard/kafka
  readOnly: true
{{- end }}
{{- if and (get . "clickhouse") (include "driftguard.tlsSources" .root.Values.clickhouse.tls) }}
- name: clickhouse-secrets
  mountPath: /var/run/secrets/driftguard/clickhouse
  readOnly: true
{{- end }}
{{- with (get ((get . "values") | default dict) "extraVolumeMounts") }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes of a driftguard pod: (dict "root" $ "values" component values or
nil "clickhouse" bool "configMap" name, default the release's config). */}}
{{- define "driftguard.volumes" -}}
- name: config
  configMap:
    name: {{ get . "configMap" | default (printf "%s-config" (include "driftguard.fullname" .root)) }}
- name: tmp
  emptyDir: {}
{{- with (include "driftguard.kafkaSources" .root) }}
- name: kafka-secrets
  projected:
    sources:
      {{- . | trim | nindent 6 }}
{{- end }}
{{- if get . "clickhouse" }}
{{- with (include "driftguard.tlsSources" .root.Values.clickhouse.tls) }}
- name: clickhouse-secrets
  projected:
    sources:
      {{- . | trim | nindent 6 }}
{{- end }}
{{- end }}
{{- with (get ((get . "values") | default dict) "extraVolumes") }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every workload:
(dict "root" $ "component" "ingest" "values" .Values.ingest "selector" extra-labels). */}}
{{- define "driftguard.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "driftguard.serviceAccountName" $root }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
{{- with (.values.priorityClassName | default $root.Values.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
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
{{- if .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml .values.topologySpreadConstraints | nindent 2 }}
{{- else if $root.Values.topologySpread.enabled }}
{{- with $root.Values.topologySpread }}
topologySpreadConstraints:
  - topologyKey: {{ .topologyKey }}
    maxSkew: {{ .maxSkew }}
    whenUnsatisfiable: {{ .whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "driftguard.selectorLabels" $ | nindent 8 }}
        {{- with (get $ "selector") }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end }}
{{- end }}
{{- with .values.initContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: labels, the config checksum that rolls pods
when the config or the catalogue changes, and the secrets' revision that
rolls them when a referenced Secret's content changes (secretsRevision). */}}
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
  {{- with .root.Values.secretsRevision }}
  checksum/secrets: {{ toString . | sha256sum }}
  {{- end }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* A container of the setup hook Job: (dict "root" $ "args" (list "topics")). */}}
{{- define "driftguard.hookContainer" -}}
{{- $root := .root -}}
{{- $migrate := eq (first .args) "migrate" -}}
- name: {{ first .args }}
  image: {{ include "driftguard.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args: {{ toJson .args }}
  env:
    {{- include "driftguard.env" $root | nindent 4 }}
    {{- if $migrate }}
    {{- include "driftguard.clickhouseEnv" $root | nindent 4 }}
    {{- end }}
  {{- include "driftguard.envFrom" (dict "root" $root) | nindent 2 }}
  resources:
    {{- toYaml $root.Values.hooks.resources | nindent 4 }}
  securityContext:
    {{- include "driftguard.containerSecurityContext" $root | nindent 4 }}
  volumeMounts:
    {{- include "driftguard.mounts" (dict "root" $root "clickhouse" $migrate) | nindent 4 }}
{{- end -}}
