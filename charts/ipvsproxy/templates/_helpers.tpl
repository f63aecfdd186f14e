{{/* The chart name, or nameOverride. */}}
{{- define "ipvsproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: fullnameOverride, else release-chart (just the release when it holds the chart name). */}}
{{- define "ipvsproxy.fullname" -}}
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

{{- define "ipvsproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ipvsproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ipvsproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ipvsproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: service-proxy
{{- end }}

{{- define "ipvsproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ipvsproxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ipvsproxy.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* HOST:PORT as Go's net.JoinHostPort writes it: IPv6 hosts in brackets. */}}
{{- define "ipvsproxy.hostPort" -}}
{{- if contains ":" .host }}[{{ .host }}]:{{ .port }}{{ else }}{{ .host }}:{{ .port }}{{ end }}
{{- end }}

{{- define "ipvsproxy.isLoopback" -}}
{{- if or (hasPrefix "127." .) (eq . "::1") (eq . "localhost") }}true{{ end }}
{{- end }}

{{/* Whether /metrics is reachable from other hosts: on, and bound beyond loopback. */}}
{{- define "ipvsproxy.metricsExposed" -}}
{{- if and (gt (int .Values.metrics.port) 0) (not (include "ipvsproxy.isLoopback" .Values.metrics.bindAddress)) }}true{{ end }}
{{- end }}

{{/* Where the ConfigMap is mounted; kube-proxy's own goes where kube-proxy mounts it, so
the kubeconfig.conf its config.conf names is found. */}}
{{- define "ipvsproxy.configDir" -}}
{{- if .Values.existingConfigMap.name }}/var/lib/kube-proxy{{ else }}/var/lib/ipvsproxy{{ end }}
{{- end }}

{{- define "ipvsproxy.configFile" -}}
{{ include "ipvsproxy.configDir" . }}/{{ if .Values.existingConfigMap.name }}{{ .Values.existingConfigMap.key }}{{ else }}config.yaml{{ end }}
{{- end }}

{{/* Whether a privileged init container sets the kernel parameters: the proxy itself can
when privileged. */}}
{{- define "ipvsproxy.initKernelParameters" -}}
{{- if and .Values.initKernelParameters (not .Values.privileged) }}true{{ end }}
{{- end }}

{{/* The job label Prometheus gives the series: the operator's default is the Service name. */}}
{{- define "ipvsproxy.job" -}}
{{- .Values.metrics.serviceMonitor.job | default (printf "%s-metrics" (include "ipvsproxy.fullname" .)) }}
{{- end }}

{{/* Whether an address is a wildcard (every address of the node). */}}
{{- define "ipvsproxy.isWildcard" -}}
{{- if has . (list "0.0.0.0" "::" "") }}true{{ end }}
{{- end }}

{{/* The kubelet probes the pod's (here: the node's) IP; a server bound to one address is probed there. */}}
{{- define "ipvsproxy.probeHost" -}}
{{- if not (include "ipvsproxy.isWildcard" .Values.healthz.bindAddress) }}{{ .Values.healthz.bindAddress }}{{ end }}
{{- end }}

{{/* An address to reach a server on the node itself: loopback for a wildcard bind. */}}
{{- define "ipvsproxy.localAddress" -}}
{{- if include "ipvsproxy.isWildcard" . }}127.0.0.1{{ else if contains ":" . }}[{{ . }}]{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* Capabilities, mounts and security context the proxy and the cleanup init container share. */}}
{{- define "ipvsproxy.securityContext" -}}
{{- if .Values.privileged -}}
privileged: true
{{- else -}}
capabilities:
  add: [NET_ADMIN, NET_RAW, SYS_MODULE]
  drop: [ALL]
{{- end }}
{{- end }}

{{- define "ipvsproxy.kernelMounts" -}}
- name: lib-modules
  mountPath: /lib/modules
  readOnly: true
- name: xtables-lock
  mountPath: /run/xtables.lock
{{- end }}
