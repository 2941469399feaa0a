"""List + watch one Kubernetes resource into an in-memory store (a small client-go reflector):
the cluster collector's watches and the demo's workload simulator (governor_tools.demo.kwatch).

* The first `list` (paged) fills the store and gives a resourceVersion; the watch resumes from the
  last resourceVersion it saw (objects and bookmarks) after every disconnect or server timeout.
* `410 Gone` (the version was compacted away) relists; the relist is diffed against the store, so
  the callback sees exactly the objects that were added, changed or deleted meanwhile.
* Other failures back off exponentially (0.2 s doubling to 30 s, with jitter: `governor.retry`)
  and retry forever.
  A resource the server does not serve (404: a CRD not installed) is retried the same way, and
  `settled` is set so that start-up does not wait for it.

Objects are decoded with msgspec straight from the response bytes into the caller's type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import aiohttp
import msgspec
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter

from governor.kube import KubeError
from governor.retry import Backoff

log = logging.getLogger("governor.reflector")

T = TypeVar("T")

WATCH_RESTARTS = Counter(
    "governor_collector_cluster_watch_restarts_total",
    "Watches of the cluster side restarted, by resource and reason (timeout, gone, error).",
    ["resource", "reason"],
)


class WatchGone(Exception):
    """The resourceVersion is too old (HTTP 410 / a watch ERROR event with code 410)."""


class _HeadMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""


class _Head(msgspec.Struct):
    metadata: _HeadMeta = msgspec.field(default_factory=_HeadMeta)


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    # `continue` is a keyword: the field is renamed on the wire.
    next_page: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


_head = msgspec.json.Decoder(_Head)
_list = msgspec.json.Decoder(_List)
_event = msgspec.json.Decoder(_Event)
_status = msgspec.json.Decoder(_Status)


def object_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


OnChange = Callable[[str, Any, Any], None]


class Reflector(Generic[T]):
    """Keeps `store` (key `namespace/name`, or `name` for cluster-scoped objects) in step with
    the API server and calls `on_change(key, old, new)` for each change (new None: deleted)."""

    def __init__(
        self,
        api: Any,
        path: str,
        decoder: msgspec.json.Decoder[T],
        on_change: OnChange,
        *,
        name: str | None = None,
        watch_timeout_s: int = 300,
        page_size: int = 500,
        request_timeout_s: float = 30.0,
        backoff_max_s: float = 30.0,
        label_selector: str | None = None,
        retry_level: int = logging.WARNING,
    ) -> None:
        self.api = api
        self.path = path
        self.name = name or path
        self._decoder = decoder
        self._on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.request_timeout_s = request_timeout_s
        self.backoff_max_s = backoff_max_s
        self.label_selector = label_selector
        self.retry_level = retry_level  # how loud a failed list or watch is logged
        self.store: dict[str, T] = {}
        self.versions: dict[str, str] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()  # listed at least once
        self.settled = asyncio.Event()  # listed, or found not served (404)
        self.served: bool | None = None
        self.lists = 0

    # --- HTTP ---------------------------------------------------------------------------------

    async def _open(self, query: list[tuple[str, str]], limits: aiohttp.ClientTimeout) -> Any:
        if self.label_selector:
            query = [("labelSelector", self.label_selector), *query]
        try:
            resp = await self.api.call_api(
                self.path,
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limits,
            )
        except ApiException as e:
            raise KubeError(int(e.status or 0), str(e.reason or ""), str(e.body or e)) from e
        if resp.status != 200:
            try:
                body = await resp.read()
            finally:
                resp.release()
            try:
                st = _status.decode(body)
                reason, message = st.reason, st.message
            except msgspec.DecodeError:
                reason, message = "", body[:500].decode("utf-8", "replace")
            if resp.status == 410:
                raise WatchGone(message)
            raise KubeError(resp.status, reason, message)
        return resp

    async def _list(self) -> None:
        fresh: dict[str, T] = {}
        versions: dict[str, str] = {}
        token = ""
        rv = ""
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        while True:
            query = [("limit", str(self.page_size))]
            if token:
                query.append(("continue", token))
            resp = await self._open(query, timeout)
            try:
                body = await resp.read()
            finally:
                resp.release()
            page = _list.decode(body)
            for raw in page.items:
                head = _head.decode(raw)
                key = object_key(head.metadata.namespace, head.metadata.name)
                fresh[key] = self._decoder.decode(raw)
                versions[key] = head.metadata.resource_version
            rv = page.metadata.resource_version
            token = page.metadata.next_page
            if not token:
                break
        old, old_versions = self.store, self.versions
        self.store, self.versions = fresh, versions
        self.resource_version = rv
        self.lists += 1
        self.served = True
        for key, obj in old.items():
            if key not in fresh:
                self._on_change(key, obj, None)
        for key, obj in fresh.items():
            if old_versions.get(key) != versions[key]:
                self._on_change(key, old.get(key), obj)
        self.synced.set()
        self.settled.set()

    async def _watch(self) -> None:
        assert self.resource_version is not None
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", str(self.watch_timeout_s)),
        ]
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.request_timeout_s, sock_read=self.watch_timeout_s + 30
        )
        resp = await self._open(query, timeout)
        try:
            buf = bytearray()
            async for chunk in resp.content.iter_any():
                buf += chunk
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line = bytes(buf[:i])
                    del buf[: i + 1]
                    if line.strip():
                        self._event(line)
            if buf.strip():
                self._event(bytes(buf))
        finally:
            resp.release()

    def _event(self, line: bytes) -> None:
        ev = _event.decode(line)
        if ev.type == "ERROR":
            st = _status.decode(ev.object)
            if st.code == 410:
                raise WatchGone(st.message)
            raise KubeError(st.code, st.reason, st.message)
        head = _head.decode(ev.object)
        if head.metadata.resource_version:
            self.resource_version = head.metadata.resource_version
        if ev.type == "BOOKMARK":
            return
        key = object_key(head.metadata.namespace, head.metadata.name)
        old = self.store.get(key)
        if ev.type == "DELETED":
            self.store.pop(key, None)
            self.versions.pop(key, None)
            self._on_change(key, old, None)
            return
        obj = self._decoder.decode(ev.object)
        self.store[key] = obj
        self.versions[key] = head.metadata.resource_version
        self._on_change(key, old, obj)

    # --- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever (until cancelled)."""
        backoff = Backoff(0.2, self.backoff_max_s, jitter=0.2)
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                WATCH_RESTARTS.labels(self.name, "timeout").inc()
                failures = 0
            except asyncio.CancelledError:
                raise
            except WatchGone as e:
                log.info("watch %s: resourceVersion gone (%s), relisting", self.name, e)
                WATCH_RESTARTS.labels(self.name, "gone").inc()
                self.resource_version = None
            except (
                KubeError,
                aiohttp.ClientError,
                TimeoutError,
                OSError,
                msgspec.DecodeError,
            ) as e:
                failures += 1
                wait = backoff.jittered(failures)
                if isinstance(e, KubeError) and e.status == 404:
                    if self.served is not False:
                        log.info("watch %s: not served by the API server (404)", self.name)
                    self.served = False
                    self.settled.set()
                else:
                    log.log(
                        self.retry_level,
                        "watch %s failed (%s), retrying in %.1fs",
                        self.name,
                        e,
                        wait,
                    )
                WATCH_RESTARTS.labels(self.name, "error").inc()
                if isinstance(e, msgspec.DecodeError):
                    self.resource_version = None  # a bad stream: start over from a list
                await asyncio.sleep(wait)
