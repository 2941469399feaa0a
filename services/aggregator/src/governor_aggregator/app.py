"""The aggregator's faust app: its settings (`governor_aggregator.main` adds the agent and
timers) and the broker's credentials in faust's form."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import faust

from governor import events
from governor.kafka_security import KafkaSecurity, password, ssl_context
from governor_aggregator.table import WorkloadTable

if TYPE_CHECKING:
    from governor_aggregator.main import AggregatorSettings

FETCH_WAIT_ENV = "FAUST_FETCH_MAX_WAIT_MS"


def broker_credentials(sec: KafkaSecurity) -> Any:
    """faust's form of the Kafka security settings (None: plaintext)."""
    if sec.protocol == "PLAINTEXT":
        return None
    ctx = ssl_context(sec) if sec.tls else None
    if not sec.sasl:
        return faust.SSLCredentials(ctx)
    return faust.SASLCredentials(
        username=sec.username, password=password(sec), ssl_context=ctx, mechanism=sec.mechanism
    )


def faust_app(s: AggregatorSettings) -> faust.App:
    """The faust app of these settings (its agent and timers: `build_app`)."""
    # Read by faust's consumer as patched by deploy/patches (its own default: 1500).
    os.environ[FETCH_WAIT_ENV] = str(s.fetch_max_wait_ms)
    return faust.App(
        s.app_id,
        broker=f"kafka://{s.kafka.bootstrap}",
        broker_credentials=broker_credentials(s.kafka.security),
        store=s.store,
        datadir=s.data_dir,
        topic_partitions=events.METRICS.partitions,
        topic_allow_declare=True,
        web_enabled=False,
        producer_acks=-1,
        broker_session_timeout=s.session_timeout_seconds,
        # Batch produce requests (the changelog; the windows have their own producer): one
        # request per message costs more than everything else the worker does.
        producer_linger=0.02,
        producer_max_batch_size=256 * 1024,
        consumer_auto_offset_reset=s.auto_offset_reset,
        # faust commits inline in its fetch loop every `broker_commit_every` acked messages (a
        # producer flush and an offset commit, fetching stalled meanwhile). Commit on the 1 s
        # timer instead.
        broker_commit_every=100_000,
        broker_commit_interval=1.0,
        table_cleanup_interval=60.0,
        table_standby_replicas=s.standby_replicas,
        # A revocation or a stop does not wait for the events handed out to be acked: the
        # checkpoint acks them, and what it did not cover is replayed (see the docstring).
        stream_wait_empty=False,
        # Everything is bytes encoded by governor's codecs; faust's own (JSON) codec would also
        # be used to read the changelog back during recovery, so it must be raw everywhere.
        key_serializer="raw",
        value_serializer="raw",
        Table=WorkloadTable,
    )
