{{/* Names, labels, images, and the autoscaler's config file. The policy's helpers: _policy.tpl. */}}

{{- define "nlg-serving.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name; components append "-triton", "-autoscaler", ... (so it stays <= 50). */}}
{{- define "nlg-serving.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nlg-serving.triton.name" -}}
{{- printf "%s-triton" (include "nlg-serving.fullname" .) }}
{{- end }}

{{- define "nlg-serving.autoscaler.name" -}}
{{- printf "%s-autoscaler" (include "nlg-serving.fullname" .) }}
{{- end }}

{{/* The ConfigMap holding the targets registered through the autoscaler's REST API. */}}
{{- define "nlg-serving.autoscaler.targets" -}}
{{- printf "%s-targets" (include "nlg-serving.fullname" .) }}
{{- end }}

{{- define "nlg-serving.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "nlg-serving.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component; call with (dict "root" $ "component" "triton"). */}}
{{- define "nlg-serving.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nlg-serving.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* A container's securityContext under the Pod Security Standard "restricted": no privilege
escalation, no capabilities, nothing written outside its volumes. */}}
{{- define "nlg-serving.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* A shell function for the init containers: `copy_into FROM INTO` copies FROM's entries (times and
modes kept) into INTO, an emptyDir's mount point. Entry by entry: the mount point is root's, and a
non-root user's `cp -a FROM/. INTO` fails setting its times. POSIX sh and cp, for any image. */}}
{{- define "nlg-serving.copyInto" -}}
copy_into() {
  [ -d "$1" ] || { echo "no directory $1 to copy into $2" >&2; exit 1; }
  for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    if [ -e "$entry" ] || [ -L "$entry" ]; then cp -pPR "$entry" "$2"/; fi
  done
}
{{- end }}

{{- define "nlg-serving.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "nlg-serving.triton.image" -}}
{{- with .Values.triton.image }}
{{- printf "%s:%s%s" .repository .tag .suffix }}
{{- end }}
{{- end }}

{{/*
The autoscaler's config file (docs/autoscaler-config.md) as a dict: autoscaler.policy is the
`scaler` section verbatim; the other sections point at this release's Service, Deployment and Lease.
*/}}
{{- define "nlg-serving.autoscaler.config" -}}
{{- $a := .Values.autoscaler }}
{{- $ns := .Release.Namespace }}
{{- $triton := include "nlg-serving.triton.name" . }}
{{- /* With the API on, it always has a token: a named Secret's, or the one autoscaler-token-secret.yaml creates. */}}
{{- $tokenFile := "" }}
{{- if gt (int $a.api.port) 0 }}{{ $tokenFile = "/var/run/secrets/nlg-autoscaler/token" }}{{ end }}
{{- /* The triton actuator talks to one pod: through the clients' Service, or by the headless
Service's name (its ports are the pods') when the clients' Service selects the balancer. */}}
{{- $tritonHost := printf "%s.%s.svc" $triton $ns }}
{{- $tritonPorts := .Values.service.ports }}
{{- if eq .Values.balancer.kind "haproxy" }}
{{- $tritonHost = printf "%s.%s.svc" (include "nlg-serving.triton.podsService" .) $ns }}
{{- $tritonPorts = .Values.triton.ports }}
{{- end }}
{{- $config := dict
  "model_id" .Values.model.name
  "scaler" (include "nlg-serving.policy" . | fromYaml)
  "source" (dict
    "kind" $a.source.kind
    "static_targets" $a.source.static_targets
    "service" (include "nlg-serving.triton.podsDiscovery" .)
    "namespace" $ns
    "port_name" "metrics"
    "prometheus_url" .Values.prometheus.url
    "timeout" (float64 $a.source.timeout))
  "actuator" (dict
    "kind" $a.actuator.kind
    "deployment" $triton
    "namespace" $ns
    "triton_url" (printf "http://%s:%v" $tritonHost $tritonPorts.http)
    "triton_metrics_url" (printf "http://%s:%v/metrics" $tritonHost $tritonPorts.metrics))
  "loop" (dict "interval" (float64 $a.loop.interval))
  "leader_election" (dict
    "enabled" $a.leader_election.enabled
    "lease_name" (include "nlg-serving.autoscaler.name" .)
    "namespace" $ns
    "lease_duration" (float64 $a.leader_election.lease_duration))
  "api" (dict "host" "0.0.0.0" "port" $a.api.port "auth" "token" "token_file" $tokenFile
    "deployments" (include "nlg-serving.autoscaler.scalable" . | fromYamlArray))
  "metrics" (dict "host" "0.0.0.0" "port" $a.metrics.port "backend" $a.metrics.backend)
  "target_store" (dict
    "kind" (ternary "configmap" "memory" (gt (int $a.api.port) 0))
    "configmap" (include "nlg-serving.autoscaler.targets" .)
    "namespace" $ns)
}}
{{- toYaml $config }}
{{- end }}

{{/*
The Deployments the autoscaler may scale, as a YAML list: the Triton Deployment and
autoscaler.api.deployments. The Role names exactly these, and the config's api.deployments refuses
an API target for any other (it could never be scaled).
*/}}
{{- define "nlg-serving.autoscaler.scalable" -}}
{{- toYaml (uniq (prepend (.Values.autoscaler.api.deployments | default list) (include "nlg-serving.triton.name" .))) }}
{{- end }}
