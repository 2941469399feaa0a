"""`governor cluster show`: the namespace quotas and Volcano queues beside the nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from governor.events import QUEUES, QUOTAS, QueueState, QuotaState

GiB = 2**30


def _amount(resource: str, v: float) -> str:
    if ("memory" in resource or "storage" in resource) and v >= 2**20:
        return f"{v / GiB:.4g}Gi"
    return f"{v:.6g}"


def _pairs(resources: Mapping[str, float], used: Mapping[str, float]) -> str:
    return ", ".join(
        f"{r} {_amount(r, used.get(r, 0.0))}/{_amount(r, a)}" for r, a in sorted(resources.items())
    )


def _plain(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{r} {_amount(r, a)}" for r, a in sorted(resources.items())) or "-"


def render_quotas(quotas: Iterable[QuotaState], console: Console) -> None:
    rows = sorted(quotas, key=lambda q: q.quota)
    if not rows:
        return
    headers = ("QUOTA", "SCOPE", "used/hard (status.used)", "UNMANAGED", "SCALED WORKLOADS")
    table = Table(*headers, title="namespace ResourceQuotas")
    for q in rows:
        scope = ", ".join(q.scopes) or "-"
        if q.priority_classes is not None:
            scope += f" [{', '.join(q.priority_classes)}]"
        table.add_row(
            q.quota,
            escape(scope),
            _pairs(q.hard, q.used),
            _plain(q.unmanaged),
            "\n".join(sorted(q.covers)) or "-",
        )
    console.print(table)


def render_queues(queues: Iterable[QueueState], console: Console) -> None:
    rows = sorted(queues, key=lambda q: q.queue)
    if not rows:
        return
    table = Table(
        "QUEUE",
        "PARENT",
        "STATE",
        Column("WEIGHT", justify="right"),
        "RECLAIM",
        "allocated/capability",
        "DESERVED",
        "GUARANTEE",
        "SCALED WORKLOADS",
        title="Volcano queues",
    )
    for q in rows:
        table.add_row(
            q.queue,
            q.parent or "-",
            q.state,
            str(q.weight),
            "yes" if q.reclaimable else "no",
            _pairs(q.capability, q.allocated) or f"- ({_plain(q.allocated)})",
            _plain(q.deserved),
            _plain(q.guarantee),
            "\n".join(sorted(q.covers)) or "-",
        )
    console.print(table)


async def read_limits(
    bootstrap: str | None, quotas_topic: str = QUOTAS.name, queues_topic: str = QUEUES.name
) -> tuple[Mapping[str, QuotaState], Mapping[str, QueueState]]:
    from governor.bus import read_table

    quotas = await read_table(bootstrap, dataclasses.replace(QUOTAS, name=quotas_topic))
    queues = await read_table(bootstrap, dataclasses.replace(QUEUES, name=queues_topic))
    return quotas, queues
