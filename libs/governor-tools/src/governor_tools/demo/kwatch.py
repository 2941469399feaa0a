"""List + watch one resource collection into a dict, calling back on every change.

A small reflector for the demo's workload simulator and its test: the first list gives the
objects and a resourceVersion; the watch (with bookmarks) resumes from the last one seen after a
server timeout or a dropped connection; 410 Gone relists. Objects are plain decoded JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

from governor.kube import Kube, KubeError, resource_path

log = logging.getLogger("governor.demo.kwatch")

OnChange = Callable[[str, dict[str, Any] | None], None]


class _Event(msgspec.Struct):
    type: str
    object: dict[str, Any]


_event = msgspec.json.Decoder(_Event)


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


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
        self.kube = kube
        self.path = resource_path(api_version, plural, namespace=namespace)
        self.label_selector = label_selector
        self.on_change = on_change
        self.timeout_s = timeout_s
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.changed = asyncio.Event()

    def _query(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.label_selector)] if self.label_selector else []

    def _apply(self, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.changed.set()
        if self.on_change is not None:
            self.on_change(key, obj)

    async def _list(self) -> str:
        doc = await self.kube.request("GET", self.path, query=self._query())
        fresh = {key_of(o): o for o in doc.get("items") or []}
        for key in list(self.objects):
            if key not in fresh:
                self._apply(key, None)
        for key, obj in fresh.items():
            if self.objects.get(key) != obj:
                self._apply(key, obj)
        self.synced.set()
        return str((doc.get("metadata") or {}).get("resourceVersion", ""))

    async def run(self) -> None:
        rv = ""
        backoff = 0.2
        while True:
            try:
                if not rv:
                    rv = await self._list()
                rv = await self._watch(rv)
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except _Gone:
                rv = ""
            except (KubeError, aiohttp.ClientError, OSError, TimeoutError) as e:
                log.info("watch %s: %s; retrying in %.1fs", self.path, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
                rv = ""

    async def _watch(self, rv: str) -> str:
        query = [
            *self._query(),
            ("watch", "1"),
            ("resourceVersion", rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.timeout_s)),
        ]
        resp = await self.kube.api.call_api(
            self.path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=self.timeout_s + 30,
        )
        try:
            if resp.status == 410:
                raise _Gone
            if resp.status != 200:
                raise KubeError(resp.status, "watch", (await resp.read()).decode()[:500])
            async for line in resp.content:
                if not line.strip():
                    continue
                ev = _event.decode(line)
                meta = ev.object.get("metadata") or {}
                if ev.type == "ERROR":
                    if ev.object.get("code") == 410:
                        raise _Gone
                    raise KubeError(int(ev.object.get("code") or 0), "watch", str(ev.object))
                rv = str(meta.get("resourceVersion", rv))
                if ev.type == "BOOKMARK":
                    continue
                key = key_of(ev.object)
                self._apply(key, None if ev.type == "DELETED" else ev.object)
        finally:
            with contextlib.suppress(Exception):
                resp.release()
        return rv


class _Gone(Exception):
    pass
