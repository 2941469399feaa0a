"""The cluster side of the collector: Kubernetes watches in, compacted topics out.

    ScalingPolicy ─┐                                   ┌─► governor.policies  (PolicyRecord)
    targets ───────┤                                   │
    Pod, Node ─────┼─► Reflectors ─► ClusterCore ──────┼─► governor.workloads (WorkloadState)
    Device ────────┤   (list+watch)  (pure compute,    │
    PriorityClass ─┤                  last published)  ├─► governor.cluster   (NodeState)
    ResourceQuota ─┤                                   ├─► governor.quotas    (QuotaState)
    Queue,PodGroup ┘                                   └─► governor.queues    (QueueState)

The loop is `governor.shell.run_core`: the watches' callbacks put each change into an `Inbox`,
the core (`governor.cores.cluster_flush.ClusterFlush` around `ClusterCore`) decides what to send
and when, and `ChangeSink` sends it, behind the Lease, acknowledging to the core what the broker
took.

Volume: one message per change, never per resync or restart. Events only mark what they touch
dirty; a flush runs `coalesce_s` (200 ms) after the first event of a burst and publishes each key
whose content differs from its last published value (timestamps aside). So a key gets at most one
message per flush, whatever the churn, and a resync (`resync_s`, a full recompute from the
watches' caches) publishes nothing unless something was missed. At start the last published
values are read back from the compacted topics, so a restart publishes only what changed while
the collector was down, including tombstones for what disappeared.

Target kinds (Deployment, StatefulSet, PyTorchJob, Volcano Job, any scalable CRD) are watched
cluster-wide once a valid policy names them; a kind the API server does not serve is retried.
Leader election. Several instances may run (for availability); they elect a leader on a
`coordination.k8s.io/v1` Lease (`governor.leader`, client-go's protocol) and only the leader
publishes. The others keep their watches and caches warm but publish nothing; on winning the
Lease an instance reads the tables back and publishes only what differs, and on losing it (its
renew deadline passed, or another holder seen) it stops publishing at once, between two
messages. The gauge `governor_collector_cluster_leader` is 1 on the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import Counter, Gauge

from governor import bus
from governor.cores import Outputs
from governor.cores.cluster import GVK, Change, ClusterCore, Report, Resource, Table, Watched
from governor.cores.cluster_flush import (
    ClusterFlush,
    ClusterInput,
    DevicesServed,
    Lead,
    Loaded,
    Resync,
    Started,
    TargetSeen,
)
from governor.events import CLUSTER, POLICIES, QUEUES, QUOTAS, WORKLOADS, Event, Topic
from governor.inventory import POOL_LABEL, DeviceObject, Node, Pod, PriorityClass
from governor.kafka_security import KafkaSecurity
from governor.kube import Kube, KubeError, connect
from governor.leader import LeaseElector
from governor.lease import check_timing
from governor.quotas import QUEUE_API, PodGroup, Queue, ResourceQuota
from governor.reflector import Reflector
from governor.retry import retrying
from governor.shell import SEND_ERRORS, Inbox, run_core

log = logging.getLogger("governor.collector.cluster")

MESSAGES = Counter(
    "governor_collector_cluster_messages_total",
    "Messages published by the cluster side, by topic and kind (update, tombstone).",
    ["topic", "kind"],
)

INVALID_POLICIES = Counter(
    "governor_collector_cluster_invalid_policies_total",
    "ScalingPolicy objects rejected by governor's validation (not published).",
)
INPUT_PROBLEMS = Counter(
    "governor_collector_cluster_input_problems_total",
    "Cluster objects (quantities, annotations, targets) that could not be read, first sightings.",
)

LEADER = Gauge(
    "governor_collector_cluster_leader",
    "1 while this cluster collector holds the leader Lease (only the leader publishes).",
)

POLICY_API = "governor.dev/v1alpha1"
# A pod's own namespace (the ServiceAccount's mount): where its Lease lives by default.
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEVICE_API = "scheduling.koordinator.sh/v1alpha1"


class ClusterCollectorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Configuration (env `GOVERNOR_CLUSTER_COLLECTOR_<FIELD>`, or the file named by
    `GOVERNOR_CLUSTER_COLLECTOR_CONFIG`)."""

    bootstrap: str = "127.0.0.1:9092"
    # governor.kafka_security: SASL_SSL as `cluster-collector` in deployment
    kafka_security: KafkaSecurity = msgspec.field(default_factory=KafkaSecurity)
    kubeconfig: str | None = None  # None: in-cluster, else $KUBECONFIG / ~/.kube/config
    coalesce_ms: int = 200
    resync_seconds: float = 300.0
    watch_timeout_seconds: int = 300
    pool_label: str = POOL_LABEL
    policies_topic: str = POLICIES.name
    workloads_topic: str = WORKLOADS.name
    cluster_topic: str = CLUSTER.name
    quotas_topic: str = QUOTAS.name
    queues_topic: str = QUEUES.name
    ensure_topics: bool = True
    startup_timeout_seconds: float = 60.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = None  # /metrics, /healthz, /readyz; None: no server
    log_level: str = "INFO"
    # Leader election on a coordination.k8s.io/v1 Lease (client-go's defaults): only the
    # holder publishes. False: this instance publishes unconditionally (run exactly one).
    leader_election: bool = True
    lease_name: str = "governor-cluster-collector"
    lease_namespace: str | None = None  # None: the pod's own namespace, else "default"
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    identity: str | None = None  # unique per live instance; None: <hostname>_<random>

    def __post_init__(self) -> None:
        if self.coalesce_ms < 0:
            raise ValueError("coalesce_ms must be >= 0")
        if self.resync_seconds <= 0:
            raise ValueError("resync_seconds must be > 0")
        check_timing(
            self.lease_duration_seconds, self.renew_deadline_seconds, self.retry_period_seconds
        )

    def lease_namespace_or_default(self) -> str:
        if self.lease_namespace:
            return self.lease_namespace
        if os.environ.get("KUBERNETES_SERVICE_HOST") and SA_NAMESPACE_FILE.is_file():
            return SA_NAMESPACE_FILE.read_text().strip()
        return "default"

    def identity_or_default(self) -> str:
        return self.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class Collect:
    """`run_core`'s core: `ClusterFlush`, plus what only the shell does with its answers (start
    the watch of a target kind a policy names, count and log what could not be read)."""

    def __init__(self, collector: ClusterCollector) -> None:
        self.collector = collector
        self.core = collector.core

    def on(self, record: ClusterInput) -> Outputs[Change]:
        out = self.core.on(record)
        if isinstance(record, Watched) and record.resource == "policy":
            self.collector.ensure_target_watches()  # a policy may name a kind not watched yet
        report(self.core.model.take_reports())
        return out

    def tick(self, now: float) -> Outputs[Change]:
        out = self.core.tick(now)
        report(self.core.model.take_reports())
        return out


def report(reports: list[Report]) -> None:
    """Count and log what the core could not read (each once), or could not compute."""
    for r in reports:
        if r.kind == "invalid_policy":
            INVALID_POLICIES.inc()
            log.warning(
                "invalid ScalingPolicy %s (not published): %s",
                r.key,
                r.text,
                extra={"policy": r.key},
            )
        elif r.kind == "failure":  # a bug must not stop the other keys' updates for good
            log.error("computing the cluster state failed; retrying after a backoff\n%s", r.text)
        else:
            INPUT_PROBLEMS.inc()
            log.warning("cluster input problem: %s", r.text)


class ChangeSink:
    """The compacted topics, behind the Lease: each change the broker acknowledged is
    acknowledged to the core (now the last published value of its key). On losing the Lease it
    stops between two messages; when a send fails, the core recomputes everything after a
    backoff (`ClusterFlush.undelivered`) and `put` returns, so the watches keep being read."""

    def __init__(
        self,
        producer: Callable[[], bus.Producer | None],
        topics: dict[Table, Topic[Any]],
        core: ClusterFlush,
        leading: Callable[[], bool],
    ) -> None:
        self.producer, self.topics, self.core, self.leading = producer, topics, core, leading

    async def put(self, items: Sequence[Change]) -> None:
        if not items:
            return
        try:
            await self._send(items)
        except SEND_ERRORS as e:
            self.core.undelivered()
            log.warning(
                "publishing %d changes failed (%s); retrying in %.1fs",
                len(items),
                e,
                self.core.wait_s(),
            )
            return
        self.core.delivered()

    async def _send(self, changes: Sequence[Change]) -> None:
        producer = self.producer()
        assert producer is not None
        futures: list[tuple[Change, asyncio.Future[Any]]] = []
        for i, ch in enumerate(changes):
            if not self.leading():  # lost the Lease mid-flush: not one message more
                log.info("lost the lease: %d changes left to the next leader", len(changes) - i)
                break
            topic = self.topics[ch.table]
            if ch.value is None:
                fut = await producer.send_raw(
                    topic.name,
                    None,
                    key=ch.key.encode(),
                    headers=bus.codec_for(topic).headers,
                )
            else:
                fut = await producer.publish(topic, ch.value)
            futures.append((ch, fut))
        failed: BaseException | None = None
        for ch, fut in futures:
            try:
                await fut
            except SEND_ERRORS as e:
                failed = e
                continue
            self.core.acknowledge(ch)
            kind = "tombstone" if ch.value is None else "update"
            MESSAGES.labels(self.topics[ch.table].name, kind).inc()
            log.debug("published %s %s", self.topics[ch.table].name, ch.key)
        if failed is not None:
            raise failed


class ClusterCollector:
    def __init__(self, settings: ClusterCollectorSettings, *, api: Any = None) -> None:
        self.settings = settings
        self.topics: dict[Table, Topic[Any]] = {
            "policies": dataclasses.replace(POLICIES, name=settings.policies_topic),
            "workloads": dataclasses.replace(WORKLOADS, name=settings.workloads_topic),
            "cluster": dataclasses.replace(CLUSTER, name=settings.cluster_topic),
            "quotas": dataclasses.replace(QUOTAS, name=settings.quotas_topic),
            "queues": dataclasses.replace(QUEUES, name=settings.queues_topic),
        }
        self.model = ClusterCore(pool_label=settings.pool_label)
        # with an election, this instance leads once it won the Lease and re-read the tables
        self.core = ClusterFlush(
            self.model,
            coalesce_s=settings.coalesce_ms / 1000.0,
            leading=not settings.leader_election,
        )
        self.inbox: Inbox[ClusterInput] = Inbox()
        self._api = api
        self._own_api = api is None
        self._tasks: list[asyncio.Task[None]] = []
        self._target_reflectors: dict[GVK, Reflector[dict[str, Any]]] = {}
        self._kube: Kube | None = None
        self._resolving: set[GVK] = set()
        self._reload: asyncio.Task[None] | None = None
        self.producer: bus.Producer | None = None
        self.elector: LeaseElector | None = None  # None: publish unconditionally
        self.ready = False

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leader

    def _on_leadership(self, leader: bool) -> None:
        LEADER.set(1 if leader else 0)
        if self._reload is not None:
            self._reload.cancel()
            self._reload = None
        if leader:  # what the previous leader published since our last read is unknown
            self._reload = asyncio.create_task(self._take_over(), name="read the tables back")
        else:
            self.inbox.put(Lead(False))

    async def _take_over(self) -> None:
        async for attempt in retrying(
            on=SEND_ERRORS, first_s=0.5, max_s=30.0, log=log, what="reading the tables back"
        ):
            with attempt:
                tables = await self._read_tables()
        if self.leading:
            self.inbox.put(Loaded(tables))

    def _start_election(self) -> None:
        s = self.settings
        if not s.leader_election:
            return
        assert self._kube is not None
        self.elector = LeaseElector(
            self._kube,
            name=s.lease_name,
            namespace=s.lease_namespace_or_default(),
            identity=s.identity_or_default(),
            lease_duration_s=s.lease_duration_seconds,
            renew_deadline_s=s.renew_deadline_seconds,
            retry_period_s=s.retry_period_seconds,
            on_change=self._on_leadership,
        )
        self._tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))

    # --- wiring -------------------------------------------------------------------------------

    def _reflector(
        self, path: str, typ: type[Any], resource: Resource, name: str, gvk: GVK | None = None
    ) -> Reflector[Any]:
        def callback(key: str, old: Any, new: Any) -> None:
            self.inbox.put(Watched(resource, key, old, new, gvk))

        r: Reflector[Any] = Reflector(
            self._api,
            path,
            msgspec.json.Decoder(typ),
            callback,
            name=name,
            watch_timeout_s=self.settings.watch_timeout_seconds,
        )
        self._tasks.append(asyncio.create_task(r.run(), name=f"watch {name}"))
        return r

    def ensure_target_watches(self) -> None:
        """Watch every target kind a valid policy names (once each)."""
        for gvk in self.model.wanted_targets():
            if gvk not in self._target_reflectors and gvk not in self._resolving:
                self._resolving.add(gvk)
                self._tasks.append(asyncio.create_task(self._watch_target(gvk)))

    async def _watch_target(self, gvk: GVK) -> None:
        """Find the kind's plural by discovery (retrying while it is not served), then watch it."""
        api_version, kind = gvk
        assert self._kube is not None
        async for attempt in retrying(
            on=KubeError,
            first_s=1.0,
            max_s=30.0,
            log=log,
            what=f"discovery of {kind}.{api_version}",
        ):
            with attempt:
                try:
                    res = await self._kube.resource(api_version, kind)
                except KubeError as e:
                    if e.status == 404:  # not served (yet): say so while waiting for it
                        self.inbox.put(TargetSeen(gvk, "missing"))
                    raise
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        name = f"{kind}.{api_version}"
        r = self._reflector(f"{root}/{res.plural}", dict[str, Any], "target", name, gvk)
        self._target_reflectors[gvk] = r
        self._resolving.discard(gvk)
        await r.settled.wait()
        self.inbox.put(TargetSeen(gvk, "synced" if r.served else "missing"))
        while r.served is not True:  # not served: wait until it is
            await r.synced.wait()
            self.inbox.put(TargetSeen(gvk, "synced"))

    # --- run ----------------------------------------------------------------------------------

    async def _read_tables(self) -> dict[Table, dict[str, Event]]:
        out: dict[Table, dict[str, Event]] = {}
        for table, topic in self.topics.items():
            out[table] = await bus.read_table(
                self.settings.bootstrap, topic, security=self.settings.kafka_security
            )
            log.info("read %d keys from %s", len(out[table]), topic.name)
        return out

    async def _start_kafka(self) -> None:
        """Topics, producer and the last published values, retried while Kafka is away (the
        watches cannot be diffed against anything before the tables are read)."""
        s = self.settings
        async for attempt in retrying(
            on=SEND_ERRORS,  # BusUnavailable is an OSError
            first_s=1.0,
            max_s=30.0,
            log=log,
            what=f"Kafka at {s.bootstrap}",
        ):
            with attempt:
                try:
                    await self._start_kafka_once()
                except SEND_ERRORS:
                    if self.producer is not None:
                        with contextlib.suppress(Exception):
                            await self.producer.stop()
                        self.producer = None
                    raise

    async def _start_kafka_once(self) -> None:
        s = self.settings
        # on a secure broker the topics are admin's (governor.kafka_provision)
        if s.ensure_topics and s.kafka_security.protocol == "PLAINTEXT":
            from governor.topics import ensure_topics

            for line in await ensure_topics(s.bootstrap, list(self.topics.values())):
                log.info("topics: %s", line)
        if self.producer is None:
            self.producer = bus.Producer(
                s.bootstrap,
                client_id="governor-cluster-collector",
                security=s.kafka_security,
            )
        await self.producer.start()
        for table, values in (await self._read_tables()).items():
            self.model.load_published(table, values)  # before run_core: nothing reads it yet

    async def flush_loop(self) -> None:
        """`run_core` over the inbox until cancelled: nothing is sent before `Started`."""
        sink = ChangeSink(lambda: self.producer, self.topics, self.core, lambda: self.leading)
        # every pass ticks; a poll waits at most a quarter of the coalescing, so that a flush
        # runs within a quarter more than `coalesce_ms` after the first change of a burst
        poll_ms = max(10, min(100, self.settings.coalesce_ms // 4))
        await run_core(Collect(self), self.inbox, sink, 0.0, poll_ms=poll_ms)

    async def run(self) -> None:
        """Run until cancelled."""
        try:
            await self._start_kafka()
            if self._api is None:
                self._api = await connect(self.settings.kubeconfig)
            self._kube = Kube(self._api)
            self._start_election()
            loop = asyncio.create_task(self.flush_loop(), name="flush")
            self._tasks.append(loop)
            await self._start_watches()
            self.inbox.put(Started())
            self.ready = True
            self._tasks.append(asyncio.create_task(self._resync_loop(), name="resync"))
            await loop
        finally:
            self.ready = False
            LEADER.set(0)
            if self._reload is not None:
                self._tasks.append(self._reload)
            for t in self._tasks:
                t.cancel()
            for t in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            self._tasks.clear()
            if self.producer is not None:
                with contextlib.suppress(Exception):
                    await self.producer.stop()
            if self._own_api and self._api is not None:
                with contextlib.suppress(Exception):
                    await self._api.close()

    async def _start_watches(self) -> None:
        core = [
            self._reflector("/api/v1/nodes", Node, "node", "nodes"),
            self._reflector("/api/v1/pods", Pod, "pod", "pods"),
            self._reflector(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                PriorityClass,
                "priority_class",
                "priorityclasses",
            ),
            self._reflector(
                f"/apis/{POLICY_API}/scalingpolicies",
                dict[str, Any],
                "policy",
                "scalingpolicies",
            ),
            self._reflector("/api/v1/resourcequotas", ResourceQuota, "quota", "resourcequotas"),
        ]
        # Volcano's CRDs may be absent (a cluster without Volcano): watched, never waited for.
        self._reflector(f"/apis/{QUEUE_API}/queues", Queue, "queue", "queues")
        self._reflector(f"/apis/{QUEUE_API}/podgroups", PodGroup, "podgroup", "podgroups")
        devices = self._reflector(f"/apis/{DEVICE_API}/devices", DeviceObject, "device", "devices")
        timeout = self.settings.startup_timeout_seconds
        try:
            await asyncio.wait_for(
                asyncio.gather(*(r.settled.wait() for r in [*core, devices])), timeout
            )
        except TimeoutError:
            waiting = [r.name for r in [*core, devices] if not r.settled.is_set()]
            raise RuntimeError(
                f"start-up: could not list {', '.join(waiting)} within {timeout:.0f}s "
                "(is the API server reachable, and may this identity list them?)"
            ) from None
        self.inbox.put(DevicesServed(bool(devices.served)))
        self._tasks.append(asyncio.create_task(self._follow_devices(devices)))
        # the targets of the policies listed so far, before the first flush (the core has taken
        # what the inbox held once it is empty: `Inbox.empty`)
        deadline = time.monotonic() + timeout
        pending: list[GVK] = []
        while time.monotonic() < deadline:
            if self.inbox.empty():
                self.ensure_target_watches()
                status = self.model.target_status
                pending = [g for g in self.model.wanted_targets() if status.get(g) is None]
                if not pending:
                    break
            await asyncio.sleep(0.05)
        else:
            log.warning("start-up: target kinds not listed in %.0fs: %s", timeout, pending)

    async def _follow_devices(self, devices: Reflector[Any]) -> None:
        """The Device CRD may be installed (or removed) after start-up."""
        served = bool(devices.served)
        while True:
            await asyncio.sleep(5.0)
            if bool(devices.served) != served:
                served = bool(devices.served)
                self.inbox.put(DevicesServed(served))

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            self.inbox.put(Resync())
