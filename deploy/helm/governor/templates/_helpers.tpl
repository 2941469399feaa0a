{{/* The services, in the kustomize base's order; the metrics adapter with
  metricsAdapter.enabled. */}}
{{- define "governor.services" -}}
collector cluster-collector aggregator decider actuator
{{- if .Values.metricsAdapter.enabled }} metrics-adapter{{ end }}
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

{{/* true when the services authenticate (SASL_SSL); fails on an unknown kafka.security. */}}
{{- define "governor.sasl" -}}
{{- if eq .Values.kafka.security "sasl_ssl" -}}
true
{{- else if ne .Values.kafka.security "plaintext" -}}
{{- fail (printf "kafka.security must be plaintext or sasl_ssl, not %q" .Values.kafka.security) -}}
{{- end -}}
{{- end -}}

{{/* Where each pod mounts its Secret governor-kafka-<service> (password, ca.pem). */}}
{{- define "governor.kafkaMount" -}}
/var/run/secrets/governor/kafka
{{- end -}}

{{/* governor.kafka_security.KafkaSecurity of principal .name: SASL_SSL, the password and the
  CA from the mounted Secret. */}}
{{- define "governor.kafkaSecurity" -}}
protocol: SASL_SSL
username: {{ .name }}
password_file: {{ include "governor.kafkaMount" . }}/password
ca_file: {{ include "governor.kafkaMount" . }}/ca.pem
{{- end -}}

{{/* The Kafka settings of service .name (ConfigMap governor-config): under `kafka:`, except the
  cluster collector's, which are flat (bootstrap, kafka_security). */}}
{{- define "governor.kafkaConfig" -}}
{{- $root := .root -}}
{{- $sasl := include "governor.sasl" $root -}}
{{- if eq .name "cluster-collector" -}}
bootstrap: {{ $root.Values.kafka.bootstrap }}
{{- if $sasl }}
kafka_security:
  {{- include "governor.kafkaSecurity" . | nindent 2 }}
{{- end }}
{{- else -}}
kafka:
  bootstrap: {{ $root.Values.kafka.bootstrap }}
{{- if $sasl }}
  security:
    {{- include "governor.kafkaSecurity" . | nindent 4 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where the metrics adapter mounts its serving pair, the Secret governor-metrics-adapter-tls
  (tls.crt, tls.key). */}}
{{- define "governor.tlsMount" -}}
/var/run/secrets/governor/tls
{{- end -}}
