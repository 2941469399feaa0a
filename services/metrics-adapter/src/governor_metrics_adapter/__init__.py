"""governor-metrics-adapter: external.metrics.k8s.io/v1beta1 from governor's load windows.

    governor-metrics-adapter [--config FILE]      (or GOVERNOR_METRICS_ADAPTER_CONFIG=FILE)

An aggregated API server, as KEDA's metrics server is for its scalers: an existing HPA points an
`External` metric at governor's window of any workload metric (governor.external_metrics says how
the metric is named and selected). It reads governor.load from its newest offsets as principal
`metrics-adapter` and keeps each (workload, metric, window)'s recent windows in memory; it
answers only the API server's front proxy (governor.front_proxy), which has already applied RBAC
to the caller. `delay_seconds` (or the metric's `governor.dev/delay-seconds` label) serves what it
held that long ago, to give an HPA what a stock Prometheus adapter would.
SIGTERM/SIGINT: stop serving, close the consumer.
"""
