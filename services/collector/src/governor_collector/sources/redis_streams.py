"""`redis_streams`: KEDA's Redis Streams scaler — pending entries, consumer-group lag or length.

`measure: pendingEntries`: the consumer group's Pending Entries List (XPENDING: delivered, not
acknowledged); `lag`: the group's `lag` from XINFO GROUPS (entries not yet delivered to the group,
Redis 7+); `streamLength`: XLEN. The client is shared with the `redis` source (see redis.py).

Errors: `stream_not_found`, `group_not_found`, `lag_unknown` (Redis older than 7, or a lag Redis
cannot compute after deletions: never guessed), and those of redis.py.
"""

from __future__ import annotations

from redis.exceptions import RedisError, ResponseError

from governor.events import MetricSample
from governor.spec import RedisStreamsSource as RedisStreamsSpec
from governor_collector.sources.base import PullSource, SourceError, register
from governor_collector.sources.redis import client_for, redis_error


@register
class RedisStreamsSource(PullSource[RedisStreamsSpec]):
    name = "redis_streams"
    config_type = RedisStreamsSpec

    async def collect(self, now: float) -> list[MetricSample]:
        spec = self.config
        c = await client_for(spec, self.ctx)
        labels = {"stream": spec.stream, "measure": spec.measure}
        try:
            if not await c.exists(spec.stream):
                raise SourceError("stream_not_found", f"no stream {spec.stream!r}")
            if spec.measure == "streamLength":
                value = float(await c.xlen(spec.stream))
            elif spec.measure == "pendingEntries":
                summary = await c.xpending(spec.stream, spec.consumer_group)
                value = float(summary["pending"])
            else:
                groups = {g["name"]: g for g in await c.xinfo_groups(spec.stream)}
                if spec.consumer_group not in groups:
                    raise SourceError(
                        "group_not_found",
                        f"stream {spec.stream!r} has no consumer group {spec.consumer_group!r}",
                    )
                lag = groups[spec.consumer_group].get("lag")
                if lag is None:
                    raise SourceError(
                        "lag_unknown",
                        "Redis reports no lag for the group (Redis 7+ computes it; after "
                        "XDEL/XTRIM it may not be able to)",
                    )
                value = float(lag)
        except ResponseError as e:
            if "NOGROUP" in str(e):
                raise SourceError(
                    "group_not_found",
                    f"stream {spec.stream!r} has no consumer group {spec.consumer_group!r}",
                ) from None
            raise redis_error(e, spec.address or str(spec.address_from_env)) from None
        except RedisError as e:
            raise redis_error(e, spec.address or str(spec.address_from_env)) from None
        if spec.consumer_group:
            labels["consumer_group"] = spec.consumer_group
        return [self.sample(value, now, labels=labels)]
