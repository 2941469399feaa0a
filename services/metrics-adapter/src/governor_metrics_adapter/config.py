"""The adapter's typed settings (governor.settings: file, then GOVERNOR_METRICS_ADAPTER_*)."""

from __future__ import annotations

import msgspec

from governor.settings import KafkaSettings

PREFIX = "GOVERNOR_METRICS_ADAPTER"


class HttpSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """/metrics, /healthz, /readyz (plain HTTP, for the kubelet's probes and Prometheus)."""

    host: str = "0.0.0.0"
    port: int = 8080


class ServeSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The aggregated API: HTTPS with the serving pair the APIService's caBundle vouches for."""

    host: str = "0.0.0.0"
    port: int = 6443  # 0: any free port (logged)
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # The front proxy's CA (PEM file) and allowed names; empty: read them from
    # kube-system/extension-apiserver-authentication, as every aggregated API server does.
    requestheader_client_ca_file: str = ""
    requestheader_allowed_names: list[str] = msgspec.field(default_factory=list)


class MetricsAdapterSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    load_topic: str = "governor.load"
    # None: in-cluster ServiceAccount, else $KUBECONFIG / ~/.kube/config (only to read the
    # front proxy's trust when it is not given above).
    kubeconfig: str | None = None
    serve: ServeSettings = msgspec.field(default_factory=ServeSettings)
    # Staleness served when a metric names none (governor.dev/delay-seconds): 0 is governor's
    # freshest window; ~30-60 is what a Prometheus adapter with a 30 s scrape gives.
    delay_seconds: float = 0.0
    # Windows are kept this long beyond the largest delay asked for.
    keep_seconds: float = 600.0
    http: HttpSettings = msgspec.field(default_factory=HttpSettings)
    log_level: str = "INFO"
