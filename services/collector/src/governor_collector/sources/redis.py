"""`redis`: KEDA's Redis scaler — the length of a list (LLEN) or the number a key holds (GET).

One client per server (address, database, TLS, user) is shared by every redis and redis_streams
source of the collector. The address is `address` (host:port) or the value of the collector's
environment variable `addressFromEnv`; the password and user likewise from `passwordFromEnv`,
`usernameFromEnv`. A missing list counts as empty (LLEN says 0, as KEDA reads it); a missing key
is an error, never a made-up 0.

Errors: `unreachable`, `timeout`, `redis` (the server refused: auth, wrong type), `bad_value`
(the key is not a number), `key_not_found`, `credentials`.
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from governor.events import MetricSample
from governor.spec import RedisConnection
from governor.spec import RedisSource as RedisSpec
from governor_collector.sources.base import (
    PullSource,
    SourceContext,
    SourceError,
    finite_number,
    register,
)

REQUEST_TIMEOUT_S = 5.0


def _env(name: str | None, what: str) -> str:
    value = os.environ.get(name or "")
    if value is None:
        raise SourceError("credentials", f"{what}: the environment variable {name!r} is not set")
    return value


async def client_for(spec: RedisConnection, ctx: SourceContext) -> Any:
    """The shared client for the server the spec names."""
    address = spec.address or _env(spec.address_from_env, "addressFromEnv")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SourceError("bad_address", f"{address!r} is not host:port")
    password = _env(spec.password_from_env, "passwordFromEnv") if spec.password_from_env else None
    user = _env(spec.username_from_env, "usernameFromEnv") if spec.username_from_env else None
    key = f"redis:{address}/{spec.database_index}:{spec.enable_tls}:{user}"

    async def create() -> Any:
        return aioredis.Redis(
            host=host,
            port=int(port),
            db=spec.database_index,
            username=user,
            password=password,
            ssl=spec.enable_tls,
            socket_timeout=REQUEST_TIMEOUT_S,
            socket_connect_timeout=REQUEST_TIMEOUT_S,
            decode_responses=True,
        )

    async def close(c: Any) -> None:
        await c.aclose()

    return await ctx.shared(key, create, close)


def redis_error(e: RedisError, address: str) -> SourceError:
    if isinstance(e, RedisTimeoutError):
        return SourceError("timeout", f"{address} did not answer")
    if isinstance(e, RedisConnectionError):
        return SourceError("unreachable", f"{address}: {e}")
    return SourceError("redis", f"{address}: {type(e).__name__}: {e}")


def number(text: Any, key: str) -> float:
    return finite_number(float, text, "bad_value", f"key {key!r} holds {text!r}")


@register
class RedisSource(PullSource[RedisSpec]):
    name = "redis"
    config_type = RedisSpec

    async def collect(self, now: float) -> list[MetricSample]:
        spec = self.config
        c = await client_for(spec, self.ctx)
        try:
            if spec.list_name is not None:
                value = float(await c.llen(spec.list_name))
                labels = {"list": spec.list_name}
            else:
                assert spec.key_name is not None  # the spec requires one of the two
                text = await c.get(spec.key_name)
                if text is None:
                    raise SourceError("key_not_found", f"no key {spec.key_name!r}")
                value = number(text, spec.key_name)
                labels = {"key": spec.key_name}
        except RedisError as e:
            raise redis_error(e, spec.address or str(spec.address_from_env)) from None
        return [self.sample(value, now, labels=labels)]
