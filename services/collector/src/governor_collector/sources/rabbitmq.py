"""`rabbitmq`: KEDA's RabbitMQ scaler over the management HTTP API — a queue's length or rate.

`GET <host>/api/queues/<vhost>/<queue>` (or, with `useRegex`, every queue of the vhost whose name
matches, combined by `operation`: sum, max or avg, as KEDA does). `mode: QueueLength` publishes
`messages` (ready + unacknowledged; `messages_ready` with `excludeUnacknowledged`),
`mode: MessageRate` the publish rate (`message_stats.publish_details.rate`, messages/s; 0 for a
queue nothing was published to yet). The vhost is `vhostName`, else the host URL's path, else
"/". Credentials: the host URL's user:password, or `usernameFromEnv`/`passwordFromEnv`; the host
itself may come from `hostFromEnv`. An amqp:// host is read as its management API (port 15672).

RabbitMQ refreshes these numbers every `collect_statistics_interval` (5 s by default), so a
sample can be that much behind the queue.

Errors: `unreachable`, `timeout`, `queue_not_found`, `http_status`, `bad_response`,
`no_queue_matches` (useRegex), `credentials`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp
import msgspec

from governor.events import MetricSample
from governor.spec import RabbitMQSource as RabbitMQSpec
from governor.spec import rabbitmq_management_url
from governor_collector.sources.base import PullSource, SourceError, register


class Rate(msgspec.Struct):
    rate: float = 0.0


class MessageStats(msgspec.Struct):
    publish_details: Rate = msgspec.field(default_factory=Rate)


class Queue(msgspec.Struct):
    name: str
    messages: int = 0
    messages_ready: int = 0
    message_stats: MessageStats = msgspec.field(default_factory=MessageStats)


_queue = msgspec.json.Decoder(Queue)
_queues = msgspec.json.Decoder(list[Queue])


def queue_value(q: Queue, mode: str, exclude_unacknowledged: bool) -> float:
    if mode == "MessageRate":
        return q.message_stats.publish_details.rate
    return float(q.messages_ready if exclude_unacknowledged else q.messages)


def combine(values: Sequence[float], operation: str) -> float:
    if operation == "max":
        return max(values)
    if operation == "avg":
        return sum(values) / len(values)
    return sum(values)


class Endpoint(msgspec.Struct, frozen=True):
    base: str  # scheme://host:port[/path prefix], no credentials
    vhost: str
    user: str | None
    password: str | None


def endpoint(spec: RabbitMQSpec) -> Endpoint:
    """Where to ask and as whom, from the spec (and the environment it names)."""
    host = spec.host
    if host is None:
        host = os.environ.get(spec.host_from_env or "")
        if not host:
            raise SourceError(
                "credentials",
                f"hostFromEnv: the environment variable {spec.host_from_env!r} is not set",
            )
    try:
        url = urlsplit(rabbitmq_management_url(host))
    except ValueError as e:
        raise SourceError("bad_host", str(e)) from None
    path = url.path.strip("/")
    prefix, _, vhost_in_url = path.rpartition("/")
    vhost = spec.vhost_name or vhost_in_url or "/"
    netloc = url.hostname or ""
    if url.port:
        netloc = f"{netloc}:{url.port}"
    base = urlunsplit((url.scheme, netloc, f"/{prefix}" if prefix else "", "", ""))
    user = os.environ.get(spec.username_from_env or "") or url.username
    password = os.environ.get(spec.password_from_env or "") or url.password
    return Endpoint(base=base, vhost=vhost, user=user, password=password)


@register
class RabbitMQSource(PullSource[RabbitMQSpec]):
    name = "rabbitmq"
    config_type = RabbitMQSpec

    async def _get(self, ep: Endpoint, path: str) -> bytes:
        headers = (
            {"Authorization": aiohttp.encode_basic_auth(ep.user, ep.password or "")}
            if ep.user
            else {}
        )
        status, body = await self.http_get(ep.base + path, where=ep.base, headers=headers)
        if status == 404:
            raise SourceError(
                "queue_not_found", f"no queue {self.config.queue_name!r} in vhost {ep.vhost!r}"
            )
        if status != 200:
            raise SourceError("http_status", f"HTTP {status} from {ep.base}{path}")
        return body

    async def collect(self, now: float) -> list[MetricSample]:
        spec = self.config
        ep = endpoint(spec)
        vhost = quote(ep.vhost, safe="")
        try:
            if spec.use_regex:
                body = await self._get(
                    ep, f"/api/queues/{vhost}?columns=name,messages,messages_ready,message_stats"
                )
                pattern = re.compile(spec.queue_name)
                queues = [q for q in _queues.decode(body) if pattern.search(q.name)]
            else:
                body = await self._get(ep, f"/api/queues/{vhost}/{quote(spec.queue_name, safe='')}")
                queues = [_queue.decode(body)]
        except msgspec.DecodeError as e:
            raise SourceError("bad_response", f"not a RabbitMQ queue: {e}") from None
        if not queues:
            raise SourceError(
                "no_queue_matches", f"no queue of vhost {ep.vhost!r} matches {spec.queue_name!r}"
            )
        values = [queue_value(q, spec.mode, spec.exclude_unacknowledged) for q in queues]
        return [
            self.sample(
                combine(values, spec.operation),
                now,
                unit="messages/s" if spec.mode == "MessageRate" else "messages",
                labels={"queues": str(len(queues))},
            )
        ]
