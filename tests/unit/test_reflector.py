"""governor.reflector against a small fake API server: paging, resume after a disconnect from the
last resourceVersion (no relist), a relist diffed against the store after 410 Gone; and the
demo's dict-of-JSON watch (governor_tools.demo.kwatch) over it.

The real kube-apiserver is exercised by tests/integration/test_cluster_state.py; a fake one is
the only way to force a disconnect or a compacted resourceVersion at a chosen moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from governor.inventory import Node
from governor.reflector import Reflector
from tests.support.http import serving
from tests.support.waiting import wait_for


@dataclass
class FakeServer:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    rv: int = 0
    compacted: int = 0  # watches from an older resourceVersion get 410
    lists: int = 0
    watches: list[int] = field(default_factory=list)  # resourceVersion each watch started from
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    generation: int = 0  # bumped to drop every open watch
    closed: bool = False
    selectors: list[str | None] = field(default_factory=list)  # labelSelector of each request

    def _obj(self, name: str, cpu: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "resourceVersion": str(self.rv)},
            "status": {"allocatable": {"cpu": cpu}},
        }

    async def put(self, name: str, cpu: str = "1") -> None:
        self.rv += 1
        kind = "MODIFIED" if name in self.objects else "ADDED"
        self.objects[name] = self._obj(name, cpu)
        self.history.append((self.rv, kind, self.objects[name]))
        async with self.changed:
            self.changed.notify_all()

    async def delete(self, name: str) -> None:
        self.rv += 1
        obj = self.objects.pop(name)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self.history.append((self.rv, "DELETED", obj))
        async with self.changed:
            self.changed.notify_all()

    async def drop_watches(self) -> None:
        self.generation += 1
        async with self.changed:
            self.changed.notify_all()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        self.selectors.append(q.get("labelSelector"))
        if q.get("watch") != "true":
            self.lists += 1
            names = sorted(self.objects)
            start = int(q.get("continue") or 0)
            limit = int(q.get("limit") or 500)
            page = names[start : start + limit]
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if start + limit < len(names):
                meta["continue"] = str(start + limit)
            return web.json_response({"metadata": meta, "items": [self.objects[n] for n in page]})
        since = int(q["resourceVersion"])
        self.watches.append(since)
        resp = web.StreamResponse()
        await resp.prepare(request)
        if since < self.compacted:
            err = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Gone"}}
            await resp.write(json.dumps(err).encode() + b"\n")
            return resp
        generation = self.generation
        sent = since
        while generation == self.generation and not self.closed:
            for rv, kind, obj in self.history:
                if rv > sent:
                    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    sent = rv
            async with self.changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 0.5)
        return resp


@pytest.fixture
async def server() -> AsyncIterator[tuple[FakeServer, str]]:
    fake = FakeServer()
    async with serving({"/api/v1/nodes": fake.handle}) as url:
        try:
            yield fake, url
        finally:
            fake.closed = True
            await fake.drop_watches()


async def test_list_watch_resume_and_relist(server: tuple[FakeServer, str]) -> None:
    fake, url = server
    for name in ("a", "b", "c"):
        await fake.put(name)
    config = Configuration(host=url)
    api = ApiClient(config)
    seen: list[tuple[str, str | None, str | None]] = []

    def on_change(key: str, old: Node | None, new: Node | None) -> None:
        def cpu(n: Node | None) -> str | None:
            return None if n is None else str(n.status.allocatable.get("cpu"))

        seen.append((key, cpu(old), cpu(new)))

    r: Reflector[Node] = Reflector(
        api, "/api/v1/nodes", msgspec.json.Decoder(Node), on_change, page_size=2
    )
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        assert sorted(r.store) == ["a", "b", "c"]  # two pages
        assert fake.lists == 2
        assert sorted(seen) == [("a", None, "1"), ("b", None, "1"), ("c", None, "1")]
        seen.clear()

        await fake.put("d", "4")
        await wait_for(lambda: "d" in r.store, what="ADDED d")
        assert seen == [("d", None, "4")]

        # a dropped connection resumes from the last resourceVersion: no relist, nothing lost
        await fake.drop_watches()
        await fake.put("a", "2")
        await wait_for(lambda: r.store["a"].status.allocatable["cpu"] == "2", what="MODIFIED a")
        assert (r.lists, fake.lists) == (1, 2)
        assert fake.watches[-1] >= 4  # resumed after d, not from the list's version
        assert seen[-1] == ("a", "1", "2")

        # the version is compacted away while disconnected: 410, relist, diff
        seen.clear()
        fake.compacted = fake.rv + 1  # what the reflector has seen is gone
        await fake.drop_watches()
        await fake.delete("b")
        await fake.put("e", "5")
        await fake.put("c", "3")
        await wait_for(lambda: r.resource_version == str(fake.rv), what="watching after a relist")
        assert r.lists == 2  # the first list and one relist (two pages each)
        assert fake.lists == 4
        assert sorted(r.store) == ["a", "c", "d", "e"]
        assert sorted(seen) == [("b", "1", None), ("c", "1", "3"), ("e", None, "5")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


async def test_not_served_settles(server: tuple[FakeServer, str]) -> None:
    _, url = server
    api = ApiClient(Configuration(host=url))
    r: Reflector[dict[str, Any]] = Reflector(
        api, "/apis/example.com/v1/things", msgspec.json.Decoder(dict[str, Any]), lambda *a: None
    )
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.settled.wait(), 5)
        assert r.served is False
        assert not r.synced.is_set()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


async def test_the_demo_watch_is_a_dict_of_json_over_the_reflector(
    server: tuple[FakeServer, str],
) -> None:
    from governor.kube import Kube
    from governor_tools.demo.kwatch import Watch

    fake, url = server
    await fake.put("a")
    api = ApiClient(Configuration(host=url))
    seen: list[tuple[str, str | None]] = []

    def on_change(key: str, obj: dict[str, Any] | None) -> None:
        seen.append((key, None if obj is None else obj["status"]["allocatable"]["cpu"]))

    w = Watch(Kube(api), "v1", "nodes", label_selector="pool=gpu", on_change=on_change)
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert seen == [("a", "1")] and w.objects["a"]["metadata"]["name"] == "a"
        await fake.put("b", "2")
        await fake.delete("a")
        await wait_for(lambda: sorted(w.objects) == ["b"], what="ADDED b, DELETED a")
        assert seen == [("a", "1"), ("b", "2"), ("a", None)]
        fake.compacted = fake.rv + 1  # 410: the relist replaces the store; objects follows it
        await fake.drop_watches()
        await fake.put("c", "3")
        await wait_for(lambda: sorted(w.objects) == ["b", "c"], what="relisted")
        assert set(fake.selectors) == {"pool=gpu"}  # every list and watch asked for the pool
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
