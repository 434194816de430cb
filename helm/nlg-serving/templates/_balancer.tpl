{{/* The balancer in front of Triton (balancer.kind): names, and HAProxy's configuration file. */}}

{{- define "nlg-serving.balancer.name" -}}
{{- printf "%s-balancer" (include "nlg-serving.fullname" .) }}
{{- end }}

{{/* The headless Service whose DNS name lists the ready Triton pods (balancer.kind=haproxy). */}}
{{- define "nlg-serving.triton.podsService" -}}
{{- printf "%s-triton-pods" (include "nlg-serving.fullname" .) }}
{{- end }}

{{/* The Service through whose EndpointSlices the autoscaler finds the Triton pods: the clients'
Service selects the balancer when there is one, so then the headless one. */}}
{{- define "nlg-serving.triton.podsDiscovery" -}}
{{- if eq .Values.balancer.kind "haproxy" }}
{{- include "nlg-serving.triton.podsService" . }}
{{- else }}
{{- include "nlg-serving.triton.name" . }}
{{- end }}
{{- end }}

{{/* Server slots per backend: HAProxy keeps one per pod it can route to, so the most pods the
scaler may run plus a rolling update's surge (25%, rounded up). A pod beyond them gets no traffic. */}}
{{- define "nlg-serving.balancer.slots" -}}
{{- $max := int .Values.autoscaler.policy.max_deployment_count }}
{{- add $max (div (add $max 3) 4) }}
{{- end }}

{{/*
haproxy.cfg. Clients keep gRPC channels (HTTP/2) for as long as they run; a Service balances those
connections, so every request of a channel goes to one pod. HAProxy ends each client's HTTP/2 and
HTTP/1.1 connections and sends every stream or request to the pod with the fewest in flight
(leastconn counts streams in HTTP mode). The pods are the headless Service's A records, resolved
every balancer.dns.interval seconds; one whose record is gone (a deleted pod leaves the
EndpointSlices at once, then keeps serving for its preStop) gets no new stream while its open ones
finish. Triton's readiness is the health check, so a pod that stops being ready (SIGTERM closes its
HTTP endpoint) is taken out within balancer.healthCheck.fall checks.
*/}}
{{- define "nlg-serving.balancer.config" -}}
{{- $b := .Values.balancer }}
{{- $ports := .Values.triton.ports }}
{{- $fqdn := printf "%s.%s.svc.%s" (include "nlg-serving.triton.podsService" .) .Release.Namespace $b.dns.clusterDomain }}
{{- $slots := include "nlg-serving.balancer.slots" . }}
global
  log stdout format raw local0 info
  # A stop (the image's STOPSIGNAL is SIGUSR1: stop listening, let open streams finish) lasts at most
  # the longest stream Triton's own drain lets finish.
  hard-stop-after {{ .Values.triton.drain.maxStreamSeconds }}s

defaults
  mode http
  log global
  option dontlognull
  # The HTTP log with the address of the pod that served the request after the backend/server name.
  log-format "%ci:%cp [%tr] %ft %b/%s %si:%sp %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %{+Q}r"
  timeout connect {{ $b.timeouts.connect }}s
  # A kept channel may idle, and a stream may wait for its first token, for this long.
  timeout client {{ $b.timeouts.idle }}s
  timeout server {{ $b.timeouts.idle }}s
  timeout check 2s
  # A connection refused by a pod that just left is retried on another one.
  retries 2
  option redispatch 1
  # Triton's readiness, on its HTTP port for both backends.
  option httpchk
  http-check connect port {{ $ports.http }} proto h1
  http-check send meth GET uri /v2/health/ready ver HTTP/1.1 hdr Host triton
  http-check expect status 200
  default-server check inter {{ $b.healthCheck.interval }}s fall {{ $b.healthCheck.fall }} rise 1 resolvers cluster init-addr none resolve-prefer ipv4

resolvers cluster
  {{- if $b.dns.nameservers }}
  {{- range $i, $server := $b.dns.nameservers }}
  nameserver dns{{ $i }} {{ $server }}
  {{- end }}
  {{- else }}
  parse-resolv-conf
  {{- end }}
  # Room for the A records of every slot (16 bytes each).
  accepted_payload_size 8192
  timeout resolve {{ $b.dns.interval }}s
  timeout retry 1s

frontend grpc
  # gRPC: HTTP/2 without TLS (h2c) from the first byte, as tritonclient speaks it.
  bind :{{ $b.ports.grpc }} proto h2
  default_backend triton-grpc

frontend http
  bind :{{ $b.ports.http }}
  default_backend triton-http

frontend stats
  bind :{{ $b.ports.metrics }}
  monitor-uri /healthz
  http-request use-service prometheus-exporter if { path /metrics }

backend triton-grpc
  balance leastconn
  server-template triton {{ $slots }} {{ $fqdn }}:{{ $ports.grpc }} proto h2

backend triton-http
  balance leastconn
  server-template triton {{ $slots }} {{ $fqdn }}:{{ $ports.http }}
{{- end }}
