"""`governor cluster show [--pool P]`: a pool's inventory as the cluster topic has it."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Iterable, Mapping

from rich.console import Console
from rich.table import Table

from governor.entry import Commands
from governor.events import CLUSTER, QUEUES, QUOTAS, NodeState
from governor.inventory import NodeSummary, PoolSummary, summarize_pool
from governor_tools.cli.cluster_limits import read_limits, render_queues, render_quotas
from governor_tools.cli.options import bootstrap_option

GiB = 2**30
# columns: resource name → (heading, scale, unit)
RESOURCES: tuple[tuple[str, str, float, str], ...] = (
    ("cpu", "CPU", 1.0, ""),
    ("memory", "MEMORY", GiB, "Gi"),
    ("nvidia.com/gpu", "nvidia.com/gpu", 1.0, ""),
)


def _num(v: float, scale: float = 1.0, unit: str = "") -> str:
    x = v / scale
    text = f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}".rstrip("0").rstrip(".")
    return text + unit


def _used(row: NodeSummary, name: str, scale: float, unit: str) -> str:
    """requested (managed + unmanaged) / allocatable [managed]."""
    alloc = row.allocatable.get(name, 0.0)
    managed = row.managed.get(name, 0.0)
    unmanaged = row.unmanaged.get(name, 0.0)
    used = managed + unmanaged
    return f"{_num(used, scale)}/{_num(alloc, scale, unit)} [{_num(managed, scale)}]"


def _devices(row: NodeSummary) -> tuple[str, str]:
    gpus = f"{row.gpus_free}/{row.gpus_healthy}/{row.gpus}" if row.gpus else "-"
    if row.gpus and row.gpu_core_free % 100:
        gpus += f" ({_num(row.gpu_core_free)}%)"
    nics = f"{row.nics_free}/{row.nics_healthy}/{row.nics}" if row.nics else "-"
    return gpus, nics


def render(summary: PoolSummary, console: Console) -> None:
    title = f"pool {summary.pool}" if summary.pool else "all pools"
    table = Table(title=f"governor cluster: {title}", show_footer=False)
    table.add_column("NODE")
    table.add_column("POOL")
    table.add_column("STATE")
    for _, heading, _, _ in RESOURCES:
        table.add_column(f"{heading} req/alloc [managed]", justify="right")
    table.add_column("GPUs free/healthy/all", justify="right")
    table.add_column("NICs free/healthy/all", justify="right")

    def add(row: NodeSummary, *, total: bool = False) -> None:
        state = "Ready" if row.ready else "NotReady"
        if not row.schedulable:
            state += ",Unschedulable"
        gpus, nics = _devices(row)
        cells = [_used(row, name, scale, unit) for name, _, scale, unit in RESOURCES]
        style = "bold" if total else None
        table.add_row(row.node, row.pool, "" if total else state, *cells, gpus, nics, style=style)

    for row in summary.nodes:
        add(row)
    if summary.nodes:
        table.add_section()
        add(summary.totals, total=True)
    console.print(table)
    free = summary.totals.free
    console.print(
        "free for managed work: "
        + ", ".join(
            f"{name} {_num(free.get(name, 0.0), scale, unit)}" for name, _, scale, unit in RESOURCES
        )
    )


def _pools(nodes: Iterable[NodeState]) -> list[str]:
    return sorted({n.pool for n in nodes})


async def _read(bootstrap: str | None, topic: str) -> Mapping[str, NodeState]:
    from governor.bus import read_table

    return await read_table(bootstrap, dataclasses.replace(CLUSTER, name=topic))


def show(args: argparse.Namespace) -> int:
    """Nodes, allocatable vs requested, free/healthy GPUs and NICs per node, and totals;
    then the namespace quotas and Volcano queues with their use."""
    bootstrap, topic, pool = args.bootstrap, args.topic, args.pool
    try:
        nodes = asyncio.run(_read(bootstrap, topic))
        quotas, queues = asyncio.run(read_limits(bootstrap, args.quotas_topic, args.queues_topic))
    except (OSError, TimeoutError, ConnectionError) as e:
        print(f"cannot read {topic}: {e}", file=sys.stderr)
        return 2
    console = Console()
    summary = summarize_pool(nodes.values(), pool)
    if not summary.nodes:
        known = ", ".join(_pools(nodes.values())) or "none"
        print(f"no nodes in pool {pool!r} on {topic} (pools: {known})", file=sys.stderr)
        return 1
    render(summary, console)
    render_quotas(quotas.values(), console)
    render_queues(queues.values(), console)
    return 0


def register(commands: Commands) -> None:
    cluster = commands.group(
        "cluster", "The cluster inventory the cluster-side collector publishes."
    )
    p = cluster.command("show", show)
    p.add_argument("--pool", "-p", help="only this pool's nodes")
    # $GOVERNOR_KAFKA_BOOTSTRAP is read where the bootstrap is resolved (bus.default_bootstrap).
    bootstrap_option(
        p, "Kafka bootstrap servers (default: $GOVERNOR_KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    p.add_argument("--topic", default=CLUSTER.name, help="the cluster topic (default: %(default)s)")
    p.add_argument(
        "--quotas-topic", default=QUOTAS.name, help="the quotas topic (default: %(default)s)"
    )
    p.add_argument(
        "--queues-topic", default=QUEUES.name, help="the queues topic (default: %(default)s)"
    )
