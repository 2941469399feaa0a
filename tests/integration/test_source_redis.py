"""The `redis` and `redis_streams` sources against a real redis-server (Debian's, 7.x): list
length, a key's number, a consumer group's pending entries and lag, a stream's length, and the
errors (missing stream or group, a non-numeric key, an unreachable server, an unset env var)."""

from __future__ import annotations

import uuid

import pytest

from governor.spec import RedisSource as RedisSpec
from governor.spec import RedisStreamsSource as StreamsSpec
from governor_collector.sources import SourceError
from tests.fixtures.redis import RedisServer
from tests.support.sources import collect_one, deployment_target

pytestmark = pytest.mark.integration

TARGET = deployment_target("shop", "worker", "m")


def key() -> str:
    return f"k-{uuid.uuid4().hex[:8]}"


async def collect(spec: RedisSpec | StreamsSpec) -> float:
    sample = await collect_one(TARGET, spec, 1000.0)
    assert sample.source == spec.__struct_config__.tag
    return sample.value


async def test_list_length_follows_the_list(redis_server: RedisServer) -> None:
    name = key()
    spec = RedisSpec(address=redis_server.address, list_name=name)
    assert await collect(spec) == 0  # a missing list is empty, as LLEN (and KEDA) read it
    redis_server.command("RPUSH", name, "a", "b", "c")
    assert await collect(spec) == 3
    redis_server.command("LPOP", name)
    assert await collect(spec) == 2


async def test_key_value_and_its_errors(redis_server: RedisServer) -> None:
    name = key()
    spec = RedisSpec(address=redis_server.address, key_name=name)
    with pytest.raises(SourceError) as err:
        await collect(spec)
    assert err.value.reason == "key_not_found"
    redis_server.command("SET", name, "12.5")
    assert await collect(spec) == 12.5
    redis_server.command("SET", name, "lots")
    with pytest.raises(SourceError) as err:
        await collect(spec)
    assert err.value.reason == "bad_value"


async def test_address_and_password_from_the_collectors_environment(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = key()
    redis_server.command("RPUSH", name, "x")
    spec = RedisSpec(address_from_env="GOVERNOR_TEST_REDIS_ADDR", list_name=name)
    with pytest.raises(SourceError) as err:
        await collect(spec)
    assert err.value.reason == "credentials"
    monkeypatch.setenv("GOVERNOR_TEST_REDIS_ADDR", redis_server.address)
    assert await collect(spec) == 1


async def test_unreachable_server_is_an_error_not_a_zero() -> None:
    spec = RedisSpec(address="127.0.0.1:1", list_name="q")
    with pytest.raises(SourceError) as err:
        await collect(spec)
    assert err.value.reason == "unreachable"


async def test_stream_pending_entries_lag_and_length(redis_server: RedisServer) -> None:
    stream, group = key(), "workers"
    addr = redis_server.address
    for i in range(10):
        redis_server.command("XADD", stream, "*", "n", str(i))
    redis_server.command("XGROUP", "CREATE", stream, group, "0")
    pending = StreamsSpec(stream=stream, consumer_group=group, address=addr)
    lag = StreamsSpec(stream=stream, consumer_group=group, address=addr, measure="lag")
    length = StreamsSpec(stream=stream, address=addr, measure="streamLength")
    assert (await collect(pending), await collect(lag), await collect(length)) == (0, 10, 10)
    # A consumer reads 4: they are pending (delivered, not acknowledged), the lag drops to 6.
    redis_server.command("XREADGROUP", "GROUP", group, "c1", "COUNT", "4", "STREAMS", stream, ">")
    assert (await collect(pending), await collect(lag)) == (4, 6)
    ids = [
        line
        for line in redis_server.command("XRANGE", stream, "-", "+", "COUNT", "2")
        .decode()
        .split("\r\n")
        if "-" in line and not line.startswith(("*", "$"))
    ]
    redis_server.command("XACK", stream, group, *ids)
    assert await collect(pending) == 2


async def test_stream_errors_name_what_is_missing(redis_server: RedisServer) -> None:
    addr = redis_server.address
    with pytest.raises(SourceError) as err:
        await collect(StreamsSpec(stream=key(), consumer_group="g", address=addr))
    assert err.value.reason == "stream_not_found"
    stream = key()
    redis_server.command("XADD", stream, "*", "n", "1")
    for measure in ("pendingEntries", "lag"):
        with pytest.raises(SourceError) as err:
            await collect(
                StreamsSpec(stream=stream, consumer_group="nobody", address=addr, measure=measure)  # type: ignore[arg-type]
            )
        assert err.value.reason == "group_not_found", measure
