"""The faust API the aggregator relies on (governor_aggregator.main): names, signatures and
behaviour. An upgrade of faust-streaming that changes any of it fails here, not in production.

Also the patch that makes faust's fetch wait settable (deploy/patches, tools/patch_deps.py): it
is applied to this environment, and only to the version it was written for."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path

import faust
import faust.streams
import faust.transport.drivers.aiokafka as faust_aiokafka
import pytest
from aiokafka.partitioner import DefaultPartitioner
from faust.stores.memory import Store as MemoryStore
from faust.tables.table import Table

from governor import events
from governor_aggregator.main import AggregatorSettings, WorkloadTable, build_app

ROOT = Path(__file__).resolve().parents[2]


def params(fn: object) -> set[str]:
    return set(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_the_pinned_version() -> None:
    # The patch and everything below were checked against this version.
    assert importlib.metadata.version("faust-streaming") == "0.15.3"


def test_the_app_settings_the_aggregator_passes_exist() -> None:
    used = {
        "broker",
        "broker_credentials",
        "store",
        "datadir",
        "topic_partitions",
        "topic_allow_declare",
        "web_enabled",
        "producer_acks",
        "producer_linger",
        "producer_max_batch_size",
        "consumer_auto_offset_reset",
        "broker_commit_every",
        "broker_commit_interval",
        "table_cleanup_interval",
        "table_standby_replicas",
        "stream_wait_empty",
        "key_serializer",
        "value_serializer",
        "Table",
    }
    # faust.Settings takes them as keywords; each is a setting (a descriptor on the class).
    missing = {name for name in used if not hasattr(faust.Settings, name)}
    assert not missing


def test_stream_batches_producer_and_consumer_calls() -> None:
    # Batches whose events the aggregator acks itself, after the checkpoint that covers them.
    stream = faust.streams.Stream
    assert {"max_", "within"} <= params(stream.noack_take)
    assert inspect.iscoroutinefunction(stream.ack)
    assert list(inspect.signature(stream.ack).parameters) == ["self", "event"]
    # A table write whose changelog fell out of the producer's metadata goes out with
    # send_and_wait(topic, key, value, partition, timestamp, headers) first (Aggregation.store).
    wait = list(inspect.signature(faust_aiokafka.Producer.send_and_wait).parameters)
    assert wait[:7] == ["self", "topic", "key", "value", "partition", "timestamp", "headers"]
    consumer = faust_aiokafka.Consumer
    for name in ("assignment", "highwater", "topic_partitions"):
        assert callable(getattr(consumer, name)), name
    # await app.consumer.seek_wait({tp: offset}): a partition ahead of its next offset is sought
    # back, in the consumer's thread (`seek` calls aiokafka from the caller's thread).
    # ... keyed by faust's TP(topic, partition) (also when the clock seeks again).
    assert faust.types.TP("t", 1) == ("t", 1)
    assert inspect.iscoroutinefunction(consumer.seek_wait)
    assert list(inspect.signature(consumer.seek_wait).parameters) == ["self", "partitions"]
    delegate = inspect.getsource(faust.transport.consumer.ThreadDelegateConsumer.seek_wait)
    assert "self._thread.seek_wait(partitions)" in delegate
    threaded = inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread.seek_wait)
    assert "call_thread" in threaded
    assert "use_partitioner" in params(Table.__init__)


def test_the_built_app_has_what_the_aggregator_uses() -> None:
    app = build_app(AggregatorSettings(data_dir="/tmp/governor-faust-api-test"))
    table = app.tables["governor-aggregator-series"]
    # Keyed by workload with the producers' partitioner: the changelog partition is the key's,
    # not the current event's (what lets a batch of several partitions write the table).
    assert table.use_partitioner is True
    # ... computed by the table class (faust's `Table` setting), as the producer's would be.
    assert isinstance(table, WorkloadTable)
    # The method the base calls on every write (on_key_set), overridden with its signature.
    assert (
        params(Table.partition_for_key)
        == params(WorkloadTable.partition_for_key)
        == {"self", "key"}
    )
    n = events.METRICS.partitions
    assert table.changelog_topic.partitions == n
    for key in (b"ns/Deployment/a", b"ns/Deployment/b", b"other/StatefulSet/x"):
        expected = DefaultPartitioner()(key, list(range(n)), list(range(n)))
        assert table.partition_for_key(key) == expected
    # A bucket of workloads' values names its partition (governor.cores.state_buckets).
    assert table.partition_for_key(b"\x003.17") == 3
    # A value back in its bucket has its own key deleted (`del table[key]`): the changelog gets
    # a tombstone, and a restore drops the key.
    assert "value=None" in inspect.getsource(Table.on_key_del)
    assert "delete_key(key" in inspect.getsource(MemoryStore.apply_changelog_batch)
    assert table.changelog_topic.get_topic_name().endswith("-changelog")
    assert {"max_messages"} <= set(vars(app.producer.buffer)) | set(dir(app.producer.buffer))
    assert hasattr(app, "on_partitions_revoked") and callable(app.on_partitions_revoked.connect)
    # The load producer is stopped on this signal; a load record not delivered crashes the app.
    assert callable(app.on_before_shutdown.connect)
    assert inspect.iscoroutinefunction(app.crash)
    assert list(inspect.signature(app.crash).parameters) == ["reason"]
    # The settings took (an unknown keyword would have been ignored silently).
    assert app.conf.broker_commit_every == 100_000
    assert app.conf.producer_linger == 0.02
    assert app.conf.consumer_auto_offset_reset == "latest"
    # A revocation or a stop does not wait for unacked events (a checkpoint acks them later).
    assert app.conf.stream_wait_empty is False
    assert [a.name for a in app.agents.values()] == ["governor_aggregator.main.aggregate"] or len(
        app.agents
    ) == 1


def test_the_fetch_wait_patch_is_applied_here() -> None:
    source = inspect.getsource(faust_aiokafka)
    assert 'fetch_max_wait_ms=int(os.environ.get("FAUST_FETCH_MAX_WAIT_MS", "1500"))' in source
    assert "fetch_max_wait_ms=1500," not in source
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "patch_deps.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "already applied" in out.stderr


def test_the_patch_tool_refuses_another_version(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import patch_deps
    finally:
        sys.path.pop(0)
    other = tmp_path / "faust-streaming-0.15.4-fetch-wait.patch"
    other.write_text((ROOT / "deploy/patches/faust-streaming-0.15.3-fetch-wait.patch").read_text())
    with pytest.raises(SystemExit, match=r"installed is 0\.15\.3"):
        patch_deps.apply(other, tmp_path)
