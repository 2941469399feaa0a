"""List + watch one resource collection into a dict of plain decoded JSON, calling back on
every change: the demo's workload simulator and its test, on the runtime library's reflector
(`governor.reflector`: paged list, watch with bookmarks resumed from the last resourceVersion,
410 Gone relists, backoff on failures)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from governor.kube import Kube, resource_path
from governor.reflector import Reflector, object_key

OnChange = Callable[[str, dict[str, Any] | None], None]

_object = msgspec.json.Decoder(dict[str, Any])


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return object_key(str(meta.get("namespace") or ""), str(meta.get("name")))


class Watch:
    """Keeps `objects` (key -> object) in sync with one collection; `on_change(key, obj|None)`."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        on_change: OnChange | None = None,
        timeout_s: int = 60,
    ) -> None:
        self.path = resource_path(api_version, plural, namespace=namespace)
        self.on_change = on_change
        self.changed = asyncio.Event()
        self.reflector: Reflector[dict[str, Any]] = Reflector(
            kube.api,
            self.path,
            _object,
            self._apply,
            watch_timeout_s=timeout_s,
            backoff_max_s=5.0,
            label_selector=label_selector,
            # the demo stops the API server under its own watches: not worth a warning
            retry_level=logging.INFO,
        )
        self.synced = self.reflector.synced

    @property
    def objects(self) -> dict[str, dict[str, Any]]:
        return self.reflector.store  # a relist replaces the store: never keep the old one

    def _apply(self, key: str, old: Any, new: dict[str, Any] | None) -> None:
        self.changed.set()
        if self.on_change is not None:
            self.on_change(key, new)

    async def run(self) -> None:
        await self.reflector.run()
