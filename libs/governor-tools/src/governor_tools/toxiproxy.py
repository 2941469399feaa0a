"""A small typed client for Toxiproxy's REST API (network faults for tests and the chaos bench).

Toxiproxy (deploy/toxiproxy: built from its Go module, `toxiproxy.sh up`) is a TCP proxy whose
proxies and "toxics" are made over HTTP. PyPI's `toxiproxy-python` (0.1.1, 2019) is synchronous,
untyped and predates several toxics; this is the part governor uses, on aiohttp (already a
dependency) with msgspec structs for the wire format:

    async with Toxiproxy("http://127.0.0.1:8474") as tp:
        await tp.create("kafka", listen="127.0.0.1:19342", upstream="127.0.0.1:19341")
        await tp.latency("kafka", ms=2000)             # 2 s each way, on new and open connections
        await tp.partition("kafka")                    # black hole: bytes go nowhere, no RST
        await tp.heal("kafka")                         # every toxic removed, proxy enabled
        await tp.disable("kafka")                      # or: refuse connections, close open ones

A partition is the `timeout` toxic with timeout 0 (data is held, connections stay open: what a
dropped route looks like to TCP) on both directions; `disable` is the other kind, a peer that
is down (connection refused at once). Errors are `ToxiproxyError(status, message)`.
"""

from __future__ import annotations

from types import TracebackType
from typing import Literal

import aiohttp
import msgspec

__all__ = ["Proxy", "Toxic", "Toxiproxy", "ToxiproxyError"]

Stream = Literal["upstream", "downstream"]
# Toxiproxy's default stream for a toxic is downstream (server -> client); a partition or a
# symmetric latency needs both.
BOTH: tuple[Stream, Stream] = ("upstream", "downstream")


class Toxic(msgspec.Struct, frozen=True):
    """One toxic on a proxy (Toxiproxy's JSON: name, type, stream, toxicity, attributes)."""

    name: str
    type: str
    stream: Stream = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, int] = {}


class Proxy(msgspec.Struct, frozen=True):
    """A proxy: clients connect to `listen`, Toxiproxy connects them on to `upstream`."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True
    toxics: list[Toxic] = []


class ToxiproxyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"toxiproxy: {status} {message}")
        self.status = status
        self.message = message


class _Enabled(msgspec.Struct):
    enabled: bool


class _Version(msgspec.Struct):
    version: str


_proxies = msgspec.json.Decoder(dict[str, Proxy])
_proxy = msgspec.json.Decoder(Proxy)
_toxic = msgspec.json.Decoder(Toxic)
_version = msgspec.json.Decoder(_Version)


class Toxiproxy:
    """The REST API at `url`. Use as `async with`, or call `aclose()`."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def __aenter__(self) -> Toxiproxy:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, body: msgspec.Struct | None = None) -> bytes:
        data = msgspec.json.encode(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        async with self._session.request(
            method, self.url + path, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                raise ToxiproxyError(resp.status, raw.decode("utf-8", "replace").strip())
            return raw

    # --- proxies ------------------------------------------------------------------------------

    async def version(self) -> str:
        return _version.decode(await self._call("GET", "/version")).version

    async def proxies(self) -> dict[str, Proxy]:
        return _proxies.decode(await self._call("GET", "/proxies"))

    async def get(self, name: str) -> Proxy:
        return _proxy.decode(await self._call("GET", f"/proxies/{name}"))

    async def create(self, name: str, *, listen: str, upstream: str) -> Proxy:
        """A new enabled proxy; one of that name is replaced (a test's leftover)."""
        if name in await self.proxies():
            await self.delete(name)
        body = Proxy(name=name, listen=listen, upstream=upstream)
        return _proxy.decode(await self._call("POST", "/proxies", body))

    async def delete(self, name: str) -> None:
        await self._call("DELETE", f"/proxies/{name}")

    async def enable(self, name: str) -> None:
        await self._call("POST", f"/proxies/{name}", _Enabled(True))

    async def disable(self, name: str) -> None:
        """The upstream is down: open connections are closed, new ones refused."""
        await self._call("POST", f"/proxies/{name}", _Enabled(False))

    # --- toxics -------------------------------------------------------------------------------

    async def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        return _toxic.decode(await self._call("POST", f"/proxies/{proxy}/toxics", toxic))

    async def remove_toxic(self, proxy: str, name: str) -> None:
        await self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    async def latency(self, proxy: str, *, ms: int, jitter_ms: int = 0) -> list[Toxic]:
        """`ms` of delay on every chunk, both ways (toxics `latency-upstream`/`-downstream`)."""
        return [
            await self.add_toxic(
                proxy,
                Toxic(
                    f"latency-{s}", "latency", s, attributes={"latency": ms, "jitter": jitter_ms}
                ),
            )
            for s in BOTH
        ]

    async def partition(self, proxy: str) -> list[Toxic]:
        """No byte passes either way and no connection is closed (a `timeout` toxic of 0),
        until `heal`: open connections hang, new ones are accepted and hang too."""
        return [
            await self.add_toxic(
                proxy, Toxic(f"partition-{s}", "timeout", s, attributes={"timeout": 0})
            )
            for s in BOTH
        ]

    async def heal(self, proxy: str) -> None:
        """Every toxic of `proxy` removed and the proxy enabled."""
        for toxic in (await self.get(proxy)).toxics:
            await self.remove_toxic(proxy, toxic.name)
        await self.enable(proxy)

    async def reset(self) -> None:
        """Every proxy enabled and every toxic removed (Toxiproxy's POST /reset)."""
        await self._call("POST", "/reset")
