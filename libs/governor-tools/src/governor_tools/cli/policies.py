"""`governor policies apply|list|delete`: the policies topic as source of truth, no cluster.

With a cluster, ScalingPolicy objects are the source of truth and the cluster-side collector
publishes them (origin "cluster"); these commands refuse to mix the two.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from governor import events
from governor.bus import Producer, default_bootstrap, read_table
from governor.shadow import mode_problems
from governor.spec import PolicyError, policies_from_yaml
from governor.topics import ensure_topics

BOOTSTRAP = typer.Option(
    None,
    "--bootstrap",
    help="Kafka bootstrap (default: $GOVERNOR_KAFKA_BOOTSTRAP or 127.0.0.1:9092)",
)


def _load(file: Path) -> list[events.PolicyRecord]:
    try:
        policies = policies_from_yaml(file.read_text())
    except OSError as err:
        typer.echo(f"cannot read {file}: {err.strerror}", err=True)
        raise typer.Exit(2) from None
    except PolicyError as err:
        typer.echo(f"{file}: invalid ScalingPolicy: {err}", err=True)
        raise typer.Exit(2) from None
    if not policies:
        typer.echo(f"{file}: no ScalingPolicy documents found", err=True)
        raise typer.Exit(2)
    now = time.time()
    return [events.PolicyRecord(policy=p, published_at=now, origin="file") for p in policies]


async def _refuse_cluster_owned(bootstrap: str) -> None:
    table = await read_table(bootstrap, events.POLICIES)
    owned = sorted(k for k, r in table.items() if r.origin == "cluster")
    if owned:
        typer.echo(
            f"the policies topic is fed from the cluster ({len(owned)} policies, e.g. {owned[0]}): "
            "edit the ScalingPolicy objects instead (one source of truth, never both)",
            err=True,
        )
        raise typer.Exit(2)


async def _apply(bootstrap: str, records: list[events.PolicyRecord]) -> None:
    await ensure_topics(bootstrap, [events.POLICIES])
    await _refuse_cluster_owned(bootstrap)
    async with Producer(bootstrap, client_id="governor-cli") as producer:
        for rec in records:
            await producer.send(events.POLICIES, rec)
            typer.echo(f"applied {rec.policy.key} -> {rec.policy.workload}")


async def _delete(bootstrap: str, keys: list[str]) -> None:
    await _refuse_cluster_owned(bootstrap)
    async with Producer(bootstrap, client_id="governor-cli") as producer:
        for key in keys:
            await producer.tombstone(events.POLICIES, key)
            typer.echo(f"deleted {key}")


def register(app: typer.Typer) -> None:
    policies = typer.Typer(help="Publish ScalingPolicies to Kafka (deployments without a cluster).")

    @policies.command("apply")
    def apply(file: Path, bootstrap: str | None = BOOTSTRAP) -> None:
        """Validate FILE (YAML, one or more ScalingPolicy documents) and publish each policy."""
        records = _load(file)
        asyncio.run(_apply(bootstrap or default_bootstrap(), records))

    @policies.command("delete")
    def delete(file: Path, bootstrap: str | None = BOOTSTRAP) -> None:
        """Delete the policies FILE names (tombstones on the compacted topic)."""
        keys = [r.policy.key for r in _load(file)]
        asyncio.run(_delete(bootstrap or default_bootstrap(), keys))

    @policies.command("list")
    def list_(bootstrap: str | None = BOOTSTRAP) -> None:
        """The policies in force: the compacted topic read to its end."""
        table = asyncio.run(read_table(bootstrap or default_bootstrap(), events.POLICIES))
        out = Table(
            "policy", "target", "mode", "min", "max", "metrics", "pool", "priority", "origin"
        )
        for key in sorted(table):
            rec = table[key]
            spec = rec.policy.spec
            out.add_row(
                key,
                rec.policy.workload,
                spec.mode,
                str(spec.min_replicas),
                str(spec.max_replicas),
                ", ".join(m.name for m in spec.metrics),
                spec.pool,
                str(spec.priority),
                rec.origin,
            )
        Console().print(out)
        for problem in mode_problems(rec.policy for rec in table.values()):
            typer.echo(f"warning: {problem}", err=True)

    app.add_typer(policies, name="policies")
