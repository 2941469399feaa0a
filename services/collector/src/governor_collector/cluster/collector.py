"""The cluster side of the collector: Kubernetes watches in, compacted topics out.

    ScalingPolicy ─┐                                   ┌─► governor.policies  (PolicyRecord)
    targets ───────┤                                   │
    Pod, Node ─────┼─► Reflectors ─► ClusterCore ──────┼─► governor.workloads (WorkloadState)
    Device ────────┤   (list+watch)  (pure compute,    │
    PriorityClass ─┤                  last published)  ├─► governor.cluster   (NodeState)
    ResourceQuota ─┤                                   ├─► governor.quotas    (QuotaState)
    Queue,PodGroup ┘                                   └─► governor.queues    (QueueState)

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
from pathlib import Path
from typing import Any

import msgspec
from aiokafka.errors import KafkaError
from prometheus_client import Counter, Gauge

from governor import bus
from governor.cores.cluster import GVK, Change, ClusterCore, Report, Resource, Table, Watched
from governor.events import CLUSTER, POLICIES, QUEUES, QUOTAS, WORKLOADS, Topic
from governor.inventory import POOL_LABEL, DeviceObject, Node, Pod, PriorityClass
from governor.kafka_security import KafkaSecurity
from governor.kube import Kube, KubeError, connect
from governor.leader import LeaseElector
from governor.lease import check_timing
from governor.quotas import QUEUE_API, PodGroup, Queue, ResourceQuota
from governor.reflector import Reflector
from governor.retry import retrying

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
        self._api = api
        self._own_api = api is None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._target_reflectors: dict[GVK, Reflector[dict[str, Any]]] = {}
        self._kube: Kube | None = None
        self._resolving: set[GVK] = set()
        self.producer: bus.Producer | None = None
        self.elector: LeaseElector | None = None  # None: publish unconditionally
        self._reload = False  # set on winning the Lease: re-read the tables before publishing
        self.ready = False
        self.flushes = 0

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leader

    def _on_leadership(self, leader: bool) -> None:
        LEADER.set(1 if leader else 0)
        if leader:  # what the previous leader published since our last read is unknown
            self._reload = True
            self._wake.set()

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

    def _changed(self) -> None:
        self._report(self.model.take_reports())
        if self.model.dirty:
            self._wake.set()

    def _report(self, reports: list[Report]) -> None:
        """Count and log what the core could not read (each once)."""
        for r in reports:
            if r.kind == "invalid_policy":
                INVALID_POLICIES.inc()
                log.warning(
                    "invalid ScalingPolicy %s (not published): %s",
                    r.key,
                    r.text,
                    extra={"policy": r.key},
                )
            else:
                INPUT_PROBLEMS.inc()
                log.warning("cluster input problem: %s", r.text)

    def _reflector(
        self, path: str, typ: type[Any], resource: Resource, name: str, gvk: GVK | None = None
    ) -> Reflector[Any]:
        def callback(key: str, old: Any, new: Any) -> None:
            self.model.on(Watched(resource, key, old, new, gvk))
            if resource == "policy":  # a policy may name a target kind not watched yet
                self._ensure_target_watches()
            self._changed()

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

    def _ensure_target_watches(self) -> None:
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
                        self.model.set_target_status(gvk, "missing")
                        self._changed()
                    raise
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        name = f"{kind}.{api_version}"
        r = self._reflector(f"{root}/{res.plural}", dict[str, Any], "target", name, gvk)
        self._target_reflectors[gvk] = r
        self._resolving.discard(gvk)
        await r.settled.wait()
        self.model.set_target_status(gvk, "synced" if r.served else "missing")
        self._changed()
        while r.served is not True:  # not served: wait until it is
            await r.synced.wait()
            self.model.set_target_status(gvk, "synced")
            self._changed()

    # --- run ----------------------------------------------------------------------------------

    async def _load_published(self) -> None:
        for table, topic in self.topics.items():
            values = await bus.read_table(
                self.settings.bootstrap, topic, security=self.settings.kafka_security
            )
            self.model.load_published(table, values)
            log.info("read %d keys from %s", len(values), topic.name)

    async def _start_kafka(self) -> None:
        """Topics, producer and the last published values, retried while Kafka is away (the
        watches cannot be diffed against anything before the tables are read)."""
        s = self.settings
        async for attempt in retrying(
            on=(KafkaError, OSError, TimeoutError),  # BusUnavailable is an OSError
            first_s=1.0,
            max_s=30.0,
            log=log,
            what=f"Kafka at {s.bootstrap}",
        ):
            with attempt:
                try:
                    await self._start_kafka_once()
                except (KafkaError, OSError, TimeoutError):
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
        await self._load_published()

    async def run(self) -> None:
        """Run until cancelled."""
        try:
            await self._start_kafka()
            if self._api is None:
                self._api = await connect(self.settings.kubeconfig)
            self._kube = Kube(self._api)
            self._start_election()
            await self._start_watches()
            self.model.mark_all_dirty()
            self._wake.set()
            self.ready = True
            self._tasks.append(asyncio.create_task(self._resync_loop(), name="resync"))
            await self._flush_loop()
        finally:
            self.ready = False
            LEADER.set(0)
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
        self.model.devices_served = bool(devices.served)
        self._tasks.append(asyncio.create_task(self._follow_devices(devices)))
        # the targets of the policies listed so far, before the first flush
        self._ensure_target_watches()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.model.target_status
            pending = [g for g in self.model.wanted_targets() if status.get(g) is None]
            if not pending:
                break
            await asyncio.sleep(0.05)
        else:
            log.warning("start-up: target kinds not listed in %.0fs: %s", timeout, pending)

    async def _follow_devices(self, devices: Reflector[Any]) -> None:
        """The Device CRD may be installed (or removed) after start-up."""
        while True:
            served = bool(devices.served)
            if served != self.model.devices_served:
                self.model.devices_served = served
                self.model.mark_all_dirty()
                self._changed()
            await asyncio.sleep(5.0)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            self.model.mark_all_dirty()
            self._wake.set()

    async def _flush_loop(self) -> None:
        coalesce = self.settings.coalesce_ms / 1000.0
        backoff = 0.5
        while True:
            await self._wake.wait()
            await asyncio.sleep(coalesce)
            self._wake.clear()
            if not self.leading:  # a follower: changes stay dirty until it leads
                continue
            try:
                if self._reload:
                    await self._load_published()
                    self._reload = False
                    self.model.mark_all_dirty()
                changes = self.model.tick(time.time()).records
                self._report(self.model.take_reports())
            except Exception:  # a bug must not stop the other keys' updates for good
                log.exception("computing the cluster state failed; retrying in %.1fs", backoff)
                self.model.mark_all_dirty()
                self._wake.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            self.flushes += 1
            if not changes:
                continue
            try:
                await self._publish(changes)
                backoff = 0.5
            except (KafkaError, OSError, TimeoutError) as e:
                log.warning(
                    "publishing %d changes failed (%s); retrying in %.1fs", len(changes), e, backoff
                )
                self.model.mark_all_dirty()
                self._wake.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _publish(self, changes: list[Change]) -> None:
        assert self.producer is not None
        futures: list[tuple[Change, asyncio.Future[Any]]] = []
        for i, ch in enumerate(changes):
            if not self.leading:  # lost the Lease mid-flush: not one message more
                log.info("lost the lease: %d changes left to the next leader", len(changes) - i)
                break
            topic = self.topics[ch.table]
            if ch.value is None:
                fut = await self.producer.send_raw(
                    topic.name,
                    None,
                    key=ch.key.encode(),
                    headers=bus.codec_for(topic).headers,
                )
            else:
                fut = await self.producer.publish(topic, ch.value)
            futures.append((ch, fut))
        failed: BaseException | None = None
        for ch, fut in futures:
            try:
                await fut
            except (KafkaError, OSError, TimeoutError) as e:
                failed = e
                continue
            self.model.acknowledge(ch)
            kind = "tombstone" if ch.value is None else "update"
            MESSAGES.labels(self.topics[ch.table].name, kind).inc()
            log.debug("published %s %s", self.topics[ch.table].name, ch.key)
        if failed is not None:
            raise failed
