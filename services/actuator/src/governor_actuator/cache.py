"""The actuator's read caches: values with a TTL (refresh-ahead), a namespace's ScalingPolicies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from governor.spec import PolicyError, ScalingPolicy, policy_from_obj

log = logging.getLogger("governor.actuator")

V = TypeVar("V")


class TtlCache(Generic[V]):
    """Values by key, never older than `ttl` seconds; concurrent misses of one key share one load.

    Refresh-ahead: a value past half its TTL is still returned, and reloaded in the background,
    so steady traffic never waits for a reload; only a value past its full TTL is waited for.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._values: dict[str, tuple[float, V]] = {}
        self._loading: dict[str, asyncio.Task[V]] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[V]]) -> V:
        hit = self._values.get(key)
        age = time.monotonic() - hit[0] if hit is not None else None
        if hit is not None and age is not None and age < self.ttl:
            if age > self.ttl / 2 and key not in self._loading:
                ahead = asyncio.ensure_future(self._load(key, load, ahead=True))
                ahead.add_done_callback(lambda t: t.cancelled() or t.exception())
                self._loading[key] = ahead
            return hit[1]
        task = self._loading.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(key, load))
            self._loading[key] = task
        return await asyncio.shield(task)

    async def _load(self, key: str, load: Callable[[], Awaitable[V]], ahead: bool = False) -> V:
        started = time.monotonic()
        try:
            value = await load()
            self._values[key] = (started, value)  # as old as the moment it was asked for
            return value
        except Exception as e:
            if ahead:  # drop the old value: the next use must load (and see the error)
                self._values.pop(key, None)
                log.warning("refresh of %s failed (%s); the next use reloads it", key, e)
            raise
        finally:
            del self._loading[key]

    def put(self, key: str, value: V) -> None:
        self._values[key] = (time.monotonic(), value)


class PolicyIndex:
    """A namespace's ScalingPolicies as last listed: by name (a ScalingPolicy, or the PolicyError
    that says why the object on the API server is not one) and by target workload."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.by_name: dict[str, ScalingPolicy | PolicyError] = {}
        self.by_workload: dict[str, str] = {}
        self.status: dict[str, dict[str, Any]] = {}
        for obj in items:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> ScalingPolicy | PolicyError:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        ref = (obj.get("spec") or {}).get("targetRef") or {}
        if (obj.get("spec") or {}).get("mode", "Active") == "Active":  # a Shadow never scales
            self.by_workload.setdefault(
                f"{meta.get('namespace')}/{ref.get('kind')}/{ref.get('name')}", name
            )
        try:
            value: ScalingPolicy | PolicyError = policy_from_obj(obj)
        except PolicyError as err:
            value = err
        self.by_name[name] = value
        self.status[name] = dict(obj.get("status") or {})
        return value
