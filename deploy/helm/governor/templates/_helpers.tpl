{{/* The services, in the kustomize base's order. */}}
{{- define "governor.services" -}}
collector cluster-collector aggregator decider actuator
{{- end -}}

{{/* Labels on every object: the base's part-of, plus Helm's own. */}}
{{- define "governor.labels" -}}
app.kubernetes.io/part-of: governor
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* GOVERNOR_<SERVICE>: the prefix of a service's settings variables. */}}
{{- define "governor.envPrefix" -}}
GOVERNOR_{{ upper . | replace "-" "_" }}
{{- end -}}

{{/* The kafka section of a service's config file (ConfigMap governor-config). */}}
{{- define "governor.kafkaConfig" -}}
kafka:
  bootstrap: {{ .Values.kafka.bootstrap }}
{{- if eq .Values.kafka.security "sasl_ssl" }}
  security_protocol: SASL_SSL
  sasl_mechanism: SCRAM-SHA-512
  ssl_cafile: /etc/governor/kafka/ca.crt
{{- else if ne .Values.kafka.security "plaintext" }}
{{- fail (printf "kafka.security must be plaintext or sasl_ssl, not %q" .Values.kafka.security) }}
{{- end }}
{{- end -}}
