"""Leader election on a Kubernetes Lease: the shell around `governor.lease` (the pure core).

    elector = LeaseElector(kube, name="governor-cluster-collector", namespace="governor",
                           identity=f"{hostname}-{pid}")
    task = asyncio.create_task(elector.run())       # tries every retry period until cancelled
    if elector.leader: ...                          # asked before every leader-only action
    await elector.became_leader.wait()              # set on each gain of the Lease

`leader` is computed from the monotonic clock each time it is read, so leadership ends at its
renew deadline even while a renewal hangs on a partitioned API server: the caller stops at once,
without waiting for the loop. On cancellation a holder releases the Lease (holderIdentity
emptied) so that a graceful restart hands over without waiting a lease duration; a killed
process simply stops renewing and loses it after `lease_duration_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from governor import lease
from governor.kube import Kube, KubeError
from governor.retry import Backoff

__all__ = ["LeaseElector", "format_micro_time", "lease_object", "parse_lease"]

log = logging.getLogger("governor.leader")

API = "coordination.k8s.io/v1"
PLURAL = "leases"


def format_micro_time(t: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(raw: Any) -> float | None:
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_lease(obj: dict[str, Any] | None) -> tuple[lease.LeaseRecord | None, str | None]:
    """The record and resourceVersion of a Lease object (None, None: there is none)."""
    if obj is None:
        return None, None
    spec = obj.get("spec") or {}
    record = lease.LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        duration_s=float(spec.get("leaseDurationSeconds") or 15),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
    )
    return record, (obj.get("metadata") or {}).get("resourceVersion")


def lease_object(
    name: str, namespace: str, record: lease.LeaseRecord, resource_version: str | None
) -> dict[str, Any]:
    """The Lease to write; with `resource_version` the write fails (409) if it changed."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    spec: dict[str, Any] = {
        "holderIdentity": record.holder or "",
        "leaseDurationSeconds": max(1, round(record.duration_s)),
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = format_micro_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = format_micro_time(record.renew_time)
    return {"apiVersion": API, "kind": "Lease", "metadata": meta, "spec": spec}


class LeaseElector:
    """Holds or follows one Lease. See the module docstring."""

    def __init__(
        self,
        kube: Kube,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        lease.check_timing(lease_duration_s, renew_deadline_s, retry_period_s)
        # Each call gets the time left before the renew deadline at most, as client-go's
        # renew context: a hung call must not outlast the leadership it is renewing.
        self.kube = Kube(kube.api, timeout_s=max(retry_period_s, renew_deadline_s / 2))
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock, self.wall_clock = clock, wall_clock
        self.on_change = on_change
        self.state = lease.Candidate()
        self.became_leader = asyncio.Event()
        self._was_leader = False
        self._wait = Backoff(retry_period_s, retry_period_s, jitter=0.2)
        self._deadline: asyncio.TimerHandle | None = None

    @property
    def leader(self) -> bool:
        return lease.is_leader(self.state, self.clock(), self.renew_deadline_s)

    def _notify(self) -> None:
        now_leader = self.leader
        if now_leader == self._was_leader:
            return
        self._was_leader = now_leader
        log.info(
            "%s %s lease %s/%s",
            self.identity,
            "acquired" if now_leader else "lost",
            self.namespace,
            self.name,
        )
        if now_leader:
            self.became_leader.set()
        else:
            self.became_leader.clear()
        if self.on_change is not None:
            self.on_change(now_leader)

    async def run(self) -> None:
        """Try to acquire or renew every retry period (jittered) until cancelled; then
        release the Lease if held."""
        try:
            while True:
                await self.try_once()
                await asyncio.sleep(self._wait.jittered(1))
        finally:
            if self._deadline is not None:
                self._deadline.cancel()
            was = self.leader
            self.state = lease.lost(self.state)
            self._notify()
            if was:
                with contextlib.suppress(KubeError, asyncio.CancelledError):
                    await asyncio.shield(self.release())

    async def try_once(self) -> None:
        """One read, and the write the core asks for. Failures are logged and leave the state
        as it was: leadership then lapses at its renew deadline by itself."""
        try:
            await self._step()
        except KubeError as e:
            log.warning("lease %s/%s: %s", self.namespace, self.name, e)
        self._notify()

    async def _step(self) -> None:
        try:
            obj: dict[str, Any] | None = await self.kube.get(
                API, PLURAL, self.name, namespace=self.namespace
            )
        except KubeError as e:
            if not e.not_found:
                raise
            obj = None
        record, rv = parse_lease(obj)
        self.state = lease.observe(self.state, record, rv, self.clock(), self.identity)
        action = lease.plan(self.state, self.identity, self.clock())
        if action == "follow":
            return
        started = self.clock()
        new = lease.record_for(
            action, record, self.identity, self.wall_clock(), self.lease_duration_s
        )
        body = lease_object(self.name, self.namespace, new, rv)
        try:
            if obj is None:
                out = await self.kube.create(API, PLURAL, body, namespace=self.namespace)
            else:
                out = await self.kube.request(
                    "PUT",
                    f"/apis/{API}/namespaces/{self.namespace}/{PLURAL}/{self.name}",
                    body=body,
                )
        except KubeError as e:
            if e.status == 409:  # someone else wrote first: follow them
                log.debug("lease %s/%s: %s lost the race", self.namespace, self.name, action)
                return
            raise
        written, written_rv = parse_lease(out)
        self.state = lease.wrote(
            lease.observe(self.state, written, written_rv, self.clock(), self.identity), started
        )
        # on_change(False) at the renew deadline itself, not when a hung call gives up
        if self._deadline is not None:
            self._deadline.cancel()
        left = started + self.renew_deadline_s - self.clock()
        self._deadline = asyncio.get_running_loop().call_later(max(0.0, left) + 0.01, self._notify)

    async def release(self) -> None:
        """Give the Lease up (holderIdentity emptied) if it is still ours."""
        obj = await self.kube.get(API, PLURAL, self.name, namespace=self.namespace)
        record, rv = parse_lease(obj)
        if record is None or record.holder != self.identity:
            return
        freed = lease.LeaseRecord(
            holder=None,
            duration_s=1.0,  # what client-go writes on release: expire at once
            renew_time=self.wall_clock(),
            transitions=record.transitions,
        )
        await self.kube.request(
            "PUT",
            f"/apis/{API}/namespaces/{self.namespace}/{PLURAL}/{self.name}",
            body=lease_object(self.name, self.namespace, freed, rv),
        )
        log.info("%s released lease %s/%s", self.identity, self.namespace, self.name)
