{{/*
autoscaler.policy as numbers, its translations to PromQL and HPA behavior, and the checks that
values.schema.json cannot express (across fields, or on decimals that `--set` passed as strings).
*/}}

{{/*
autoscaler.policy with its decimals as numbers: `--set` passes 22.5 as the string "22.5" (the schema
accepts such strings), the autoscaler's config wants numbers. Returns YAML; use with fromYaml.
*/}}
{{- define "nlg-serving.policy" -}}
{{- $p := deepCopy .Values.autoscaler.policy }}
{{- range $key := list "time_window" "threshold" "tolerance" "stabilization_window" }}
{{- $_ := set $p $key (float64 (get $p $key)) }}
{{- end }}
{{- range $direction := list "scale_up" "scale_down" }}
{{- $limit := get $p $direction }}
{{- $_ := set $limit "max_percent" (float64 $limit.max_percent) }}
{{- $_ = set $limit "period" (float64 $limit.period) }}
{{- end }}
{{- range $p.signals }}
{{- $_ := set . "target" (float64 .target) }}
{{- end }}
{{- $planner := $p.planner | default dict }}
{{- range $key, $value := $planner }}
{{- $_ := set $planner $key (float64 $value) }}
{{- end }}
{{- if eq $p.type "planner" }}
{{- $_ := set $planner "profile" (include "nlg-serving.plannerProfilePath" .) }}
{{- end }}
{{- $_ := set $p "planner" $planner }}
{{- toYaml $p }}
{{- end }}

{{/* Where the autoscaler reads policy.type planner's engine profile (a ConfigMap mounted there). */}}
{{- define "nlg-serving.plannerProfileDir" -}}/etc/nlg-autoscaler-profile{{- end }}
{{- define "nlg-serving.plannerProfilePath" -}}
{{- printf "%s/%s" (include "nlg-serving.plannerProfileDir" .) .Values.autoscaler.plannerProfile.key }}
{{- end }}

{{/* The ConfigMap holding the planner's profile: the user's, or the one the chart makes from json. */}}
{{- define "nlg-serving.plannerProfileConfigMap" -}}
{{- .Values.autoscaler.plannerProfile.configMap | default (printf "%s-profile" (include "nlg-serving.autoscaler.name" .)) }}
{{- end }}

{{/* Seconds as a PromQL duration: 60 -> 60s, 7.5 -> 7500ms. */}}
{{- define "nlg-serving.promDuration" -}}
{{- $ms := round (mulf . 1000) 0 | int64 }}
{{- if eq (mod $ms 1000) 0 }}{{ div $ms 1000 }}s{{ else }}{{ $ms }}ms{{ end }}
{{- end }}

{{/* PromQL label matchers that select this release's Triton series. */}}
{{- define "nlg-serving.promSelector" -}}
{{- $m := printf "namespace=\"%s\",model=\"%s\"" .Release.Namespace .Values.model.name }}
{{- with .Values.prometheus.extraMatchers }}{{ $m = printf "%s,%s" $m . }}{{ end }}
{{- $m }}
{{- end }}

{{/*
PromQL of one signal of docs/autoscaler-config.md, in the signal's unit (ms for latencies),
over the policy's time_window. "x >= 0" drops the NaN of 0/0, so a window without traffic reads 0.
Call with (dict "root" $ "metric" "pertoken_mean").
*/}}
{{- define "nlg-serving.promql" -}}
{{- $sel := include "nlg-serving.promSelector" .root }}
{{- $w := include "nlg-serving.promDuration" (include "nlg-serving.policy" .root | fromYaml).time_window }}
{{- $families := dict "request" "nlg_request_latency_seconds" "pertoken" "nlg_time_per_output_token_seconds" "ttft" "nlg_time_to_first_token_seconds" "itl" "nlg_inter_token_latency_seconds" }}
{{- $parts := splitList "_" .metric }}
{{- if eq .metric "waiting_per_replica" }}
{{- printf "avg(nlg_requests_waiting{%s}) or vector(0)" $sel }}
{{- else if eq .metric "kv_usage" }}
{{- printf "avg(nlg_kv_cache_usage_ratio{%s}) or vector(0)" $sel }}
{{- else if eq .metric "queue_mean" }}
{{- /* Triton's own counters (docs/backends.md): summed microseconds over requests, in ms. */}}
{{- printf "sum(rate(nv_inference_queue_duration_us{%s}[%s])) / 1000 / sum(rate(nv_inference_request_success{%s}[%s])) >= 0 or vector(0)" $sel $w $sel $w }}
{{- else }}
{{- $family := get $families (index $parts 0) }}
{{- $stat := index $parts 1 }}
{{- if eq $stat "mean" }}
{{- printf "1000 * sum(rate(%s_sum{%s}[%s])) / sum(rate(%s_count{%s}[%s])) >= 0 or vector(0)" $family $sel $w $family $sel $w }}
{{- else }}
{{- $q := printf "0.%s" (trimPrefix "p" $stat) }}
{{- printf "1000 * histogram_quantile(%s, sum by (le) (rate(%s_bucket{%s}[%s]))) >= 0 or vector(0)" $q $family $sel $w }}
{{- end }}
{{- end }}
{{- end }}

{{/* Checks across fields that values.schema.json cannot express; each message names the keys. */}}
{{- define "nlg-serving.validate" -}}
{{- $p := include "nlg-serving.policy" . | fromYaml }}
{{- /* Zero passes the schema's pattern for strings ("0.0"); the numbers it converts are checked here. */}}
{{- $a := .Values.autoscaler }}
{{- $positive := dict
  "autoscaler.policy.time_window" $p.time_window
  "autoscaler.policy.threshold" $p.threshold
  "autoscaler.policy.scale_up.period" $p.scale_up.period
  "autoscaler.policy.scale_down.period" $p.scale_down.period
  "autoscaler.source.timeout" $a.source.timeout
  "autoscaler.loop.interval" $a.loop.interval
  "autoscaler.leader_election.lease_duration" $a.leader_election.lease_duration }}
{{- range $i, $s := $p.signals }}
{{- $_ := set $positive (printf "autoscaler.policy.signals[%d].target" $i) $s.target }}
{{- end }}
{{- range $key, $value := $positive }}
{{- if le (float64 $value) 0.0 }}
{{- fail (printf "%s (%v) must be greater than 0" $key $value) }}
{{- end }}
{{- end }}
{{- if gt (float64 $p.min_deployment_count) (float64 $p.max_deployment_count) }}
{{- fail (printf "autoscaler.policy.min_deployment_count (%v) must be less than or equal to autoscaler.policy.max_deployment_count (%v): raise max_deployment_count or lower min_deployment_count" $p.min_deployment_count $p.max_deployment_count) }}
{{- end }}
{{- if and (eq .Values.scaling.mode "autoscaler") (lt (float64 $p.min_deployment_count) 1.0) }}
{{- fail (printf "autoscaler.policy.min_deployment_count (%v) must be at least 1 with scaling.mode=autoscaler: with no pod there is no metric to scale up from; use scaling.mode=keda to scale to zero" $p.min_deployment_count) }}
{{- end }}
{{- if and (eq .Values.scaling.mode "hpa") (lt (float64 $p.min_deployment_count) 1.0) }}
{{- fail (printf "autoscaler.policy.min_deployment_count (%v) must be at least 1 with scaling.mode=hpa: a HorizontalPodAutoscaler cannot scale to zero; use scaling.mode=keda or autoscaler for that" $p.min_deployment_count) }}
{{- end }}
{{- $metrics := list }}
{{- range $i, $s := $p.signals }}
{{- if has $s.metric $metrics }}
{{- fail (printf "autoscaler.policy.signals[%d].metric (%s) is listed twice: keep one" $i $s.metric) }}
{{- end }}
{{- $metrics = append $metrics $s.metric }}
{{- if and (eq $s.metric "kv_usage") (gt (float64 $s.target) 1.0) }}
{{- fail (printf "autoscaler.policy.signals[%d].target (%v): kv_usage is a ratio, use a value in (0, 1]" $i $s.target) }}
{{- end }}
{{- end }}
{{- if ne .Values.scaling.mode "autoscaler" }}
{{- if gt (float64 $p.stabilization_window) 3600.0 }}
{{- fail (printf "autoscaler.policy.stabilization_window (%v) must be at most 3600 with scaling.mode=%s: the HPA's limit" $p.stabilization_window .Values.scaling.mode) }}
{{- end }}
{{- range $direction := list "scale_up" "scale_down" }}
{{- $period := (get $p $direction).period }}
{{- if or (lt (float64 $period) 1.0) (gt (float64 $period) 1800.0) }}
{{- fail (printf "autoscaler.policy.%s.period (%v) must be between 1 and 1800 s with scaling.mode=%s: the HPA's limits" $direction $period $.Values.scaling.mode) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $p.type "planner" }}
{{- $profile := $a.plannerProfile }}
{{- if and $profile.json $profile.configMap }}
{{- fail "autoscaler.plannerProfile: set json or configMap, not both: the planner reads one profile" }}
{{- end }}
{{- if not (or $profile.json $profile.configMap) }}
{{- fail "autoscaler.plannerProfile: policy.type planner plans from an engine profile; set plannerProfile.json (--set-file autoscaler.plannerProfile.json=benchmarks/profiles/cpu-gpt2-fp32.json) or plannerProfile.configMap (a ConfigMap of yours holding it)" }}
{{- end }}
{{- if $profile.json }}
{{- $parsed := $profile.json | fromJson }}
{{- if hasKey $parsed "Error" }}
{{- fail (printf "autoscaler.plannerProfile.json is not JSON (%s): give the file `python -m nlgsim profile` writes" $parsed.Error) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (eq .Values.weights.source "pvc") (not .Values.weights.pvc.claimName) }}
{{- fail "weights.pvc.claimName is empty with weights.source=pvc: name the PersistentVolumeClaim that holds the checkpoint" }}
{{- end }}
{{- if and (eq .Values.weights.source "initContainer") (not .Values.weights.initContainer.image.repository) }}
{{- fail "weights.initContainer.image.repository is empty with weights.source=initContainer: name the image that carries or fetches the checkpoint" }}
{{- end }}
{{- if and (eq .Values.package.delivery "initContainer") (not .Values.package.sitePackages) }}
{{- fail "package.sitePackages is empty with package.delivery=initContainer: the triton_backend package must be copied from the project image" }}
{{- end }}
{{- end }}

{{/*
autoscaler.policy as HPA `behavior` (used by the keda and hpa modes): scale_up/scale_down become a
Pods and a Percent policy per direction, `select` their selectPolicy (max: the larger wins, min: the
smaller, as in the autoscaler); a limit of 0 leaves its policy out, and a direction is Disabled when
both are 0 (select max) or either is (select min). stabilization_window is the scale-down window.
*/}}
{{- define "nlg-serving.hpaBehavior" -}}
{{- $p := include "nlg-serving.policy" . | fromYaml }}
{{- range $direction, $limit := dict "scaleUp" $p.scale_up "scaleDown" $p.scale_down }}
{{ $direction }}:
  stabilizationWindowSeconds: {{ ternary 0 (int $p.stabilization_window) (eq $direction "scaleUp") }}
  {{- $select := $limit.select | default "max" }}
  {{- $zeros := add (ternary 1 0 (eq (float64 $limit.max_pods) 0.0)) (ternary 1 0 (eq (float64 $limit.max_percent) 0.0)) }}
  {{- if or (eq (int $zeros) 2) (and (eq $select "min") (gt (int $zeros) 0)) }}
  selectPolicy: Disabled
  {{- else }}
  selectPolicy: {{ title $select }}
  policies:
    {{- if gt (float64 $limit.max_pods) 0.0 }}
    - type: Pods
      value: {{ int $limit.max_pods }}
      periodSeconds: {{ int $limit.period }}
    {{- end }}
    {{- if gt (float64 $limit.max_percent) 0.0 }}
    - type: Percent
      value: {{ int $limit.max_percent }}
      periodSeconds: {{ int $limit.period }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}
