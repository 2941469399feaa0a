"""`governor cluster show [--pool P]`: a pool's inventory as the cluster topic has it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping

import typer
from rich.console import Console
from rich.table import Table

from governor.events import CLUSTER, QUEUES, QUOTAS, NodeState
from governor.inventory import NodeSummary, PoolSummary, summarize_pool
from governor_tools.cli.cluster_limits import read_limits, render_queues, render_quotas

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


def register(app: typer.Typer) -> None:
    cluster = typer.Typer(help="The cluster inventory the cluster-side collector publishes.")

    @cluster.command("show")
    def show(
        pool: str | None = typer.Option(None, "--pool", "-p", help="only this pool's nodes"),
        bootstrap: str | None = typer.Option(
            None,
            "--bootstrap",
            envvar="GOVERNOR_KAFKA_BOOTSTRAP",
            help="Kafka bootstrap servers (default 127.0.0.1:9092)",
        ),
        topic: str = typer.Option(CLUSTER.name, "--topic", help="the cluster topic"),
        quotas_topic: str = typer.Option(QUOTAS.name, "--quotas-topic", help="the quotas topic"),
        queues_topic: str = typer.Option(QUEUES.name, "--queues-topic", help="the queues topic"),
    ) -> None:
        """Nodes, allocatable vs requested, free/healthy GPUs and NICs per node, and totals;
        then the namespace quotas and Volcano queues with their use."""
        try:
            nodes = asyncio.run(_read(bootstrap, topic))
            quotas, queues = asyncio.run(read_limits(bootstrap, quotas_topic, queues_topic))
        except (OSError, TimeoutError, ConnectionError) as e:
            typer.echo(f"cannot read {topic}: {e}", err=True)
            raise typer.Exit(2) from None
        console = Console()
        summary = summarize_pool(nodes.values(), pool)
        if not summary.nodes:
            known = ", ".join(_pools(nodes.values())) or "none"
            typer.echo(f"no nodes in pool {pool!r} on {topic} (pools: {known})", err=True)
            raise typer.Exit(1)
        render(summary, console)
        render_quotas(quotas.values(), console)
        render_queues(queues.values(), console)

    app.add_typer(cluster, name="cluster")
