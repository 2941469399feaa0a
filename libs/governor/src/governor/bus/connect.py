"""Where Kafka is, and starting a client against it with bounded exponential backoff."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError
from tenacity import RetryError

from governor import retry

log = logging.getLogger("governor.bus")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def default_bootstrap() -> str:
    """`GOVERNOR_KAFKA_BOOTSTRAP`, else the local broker's address."""
    return os.environ.get("GOVERNOR_KAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP)


class BusUnavailable(ConnectionError):
    """Kafka did not answer within the start timeout."""


Client = TypeVar("Client", AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient)


async def start_client(
    make: Callable[[], Client], what: str, bootstrap: str, timeout_s: float
) -> Client:
    """`make()` and start a client, retrying (0.1 s doubling to 5 s) until `timeout_s` is spent;
    then `BusUnavailable` names the address. A client that failed to start is stopped before
    the next one is made."""
    attempts = 0

    async def once() -> Client:
        nonlocal attempts
        attempts += 1
        client = make()
        try:
            await client.start()
        except BaseException:
            stop = client.close if isinstance(client, AIOKafkaAdminClient) else client.stop
            with contextlib.suppress(Exception):
                await stop()
            raise
        return client

    try:
        client: Client = await retry.retrying(
            on=(KafkaConnectionError, KafkaError, OSError),
            first_s=0.1,
            max_s=5.0,
            deadline=time.monotonic() + timeout_s,
            log=log,
            what=f"{what}: Kafka at {bootstrap}",
        )(once)
    except RetryError as e:
        err = e.last_attempt.exception()
        raise BusUnavailable(
            f"{what}: Kafka at {bootstrap} did not answer within {timeout_s:.0f}s "
            f"({type(err).__name__}: {err}). Is it up? `governor dev kafka up` starts a "
            f"local broker; GOVERNOR_KAFKA_BOOTSTRAP names another."
        ) from err
    if attempts > 1:
        log.info("%s connected to %s after %d attempts", what, bootstrap, attempts)
    return client


def connected(client: Any) -> bool:
    """Whether aiokafka holds a live connection to some broker (best effort, private API)."""
    try:
        return any(conn.connected() for conn in client._conns.values())
    except Exception:  # pragma: no cover - aiokafka internals moved
        return True
