"""`governor policies apply|list|delete`: the policies topic as source of truth, no cluster.

With a cluster, ScalingPolicy objects are the source of truth and the cluster-side collector
publishes them (origin "cluster"); these commands refuse to mix the two.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from governor import events
from governor.bus import Producer, default_bootstrap, read_table
from governor.entry import Commands
from governor.shadow import mode_problems
from governor.spec import PolicyError, policies_from_yaml
from governor.topics import ensure_topics
from governor_tools.cli.options import bootstrap_option


def _fail(text: str) -> SystemExit:
    print(text, file=sys.stderr)
    return SystemExit(2)


def _load(file: Path) -> list[events.PolicyRecord]:
    try:
        policies = policies_from_yaml(file.read_text())
    except OSError as err:
        raise _fail(f"cannot read {file}: {err.strerror}") from None
    except PolicyError as err:
        raise _fail(f"{file}: invalid ScalingPolicy: {err}") from None
    if not policies:
        raise _fail(f"{file}: no ScalingPolicy documents found")
    now = time.time()
    return [events.PolicyRecord(policy=p, published_at=now, origin="file") for p in policies]


async def _refuse_cluster_owned(bootstrap: str) -> None:
    table = await read_table(bootstrap, events.POLICIES)
    owned = sorted(k for k, r in table.items() if r.origin == "cluster")
    if owned:
        raise _fail(
            f"the policies topic is fed from the cluster ({len(owned)} policies, e.g. {owned[0]}): "
            "edit the ScalingPolicy objects instead (one source of truth, never both)"
        )


async def _apply(bootstrap: str, records: list[events.PolicyRecord]) -> None:
    await ensure_topics(bootstrap, [events.POLICIES])
    await _refuse_cluster_owned(bootstrap)
    async with Producer(bootstrap, client_id="governor-cli") as producer:
        for rec in records:
            await producer.send(events.POLICIES, rec)
            print(f"applied {rec.policy.key} -> {rec.policy.workload}")


async def _delete(bootstrap: str, keys: list[str]) -> None:
    await _refuse_cluster_owned(bootstrap)
    async with Producer(bootstrap, client_id="governor-cli") as producer:
        for key in keys:
            await producer.tombstone(events.POLICIES, key)
            print(f"deleted {key}")


def apply(args: argparse.Namespace) -> None:
    """Validate FILE (YAML, one or more ScalingPolicy documents) and publish each policy."""
    records = _load(args.file)
    asyncio.run(_apply(args.bootstrap or default_bootstrap(), records))


def delete(args: argparse.Namespace) -> None:
    """Delete the policies FILE names (tombstones on the compacted topic)."""
    keys = [r.policy.key for r in _load(args.file)]
    asyncio.run(_delete(args.bootstrap or default_bootstrap(), keys))


def list_(args: argparse.Namespace) -> None:
    """The policies in force: the compacted topic read to its end."""
    table = asyncio.run(read_table(args.bootstrap or default_bootstrap(), events.POLICIES))
    out = Table("policy", "target", "mode", "min", "max", "metrics", "pool", "priority", "origin")
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
        print(f"warning: {problem}", file=sys.stderr)


def register(commands: Commands) -> None:
    policies = commands.group(
        "policies", "Publish ScalingPolicies to Kafka (deployments without a cluster)."
    )
    for name, run in (("apply", apply), ("delete", delete)):
        p = policies.command(name, run)
        p.add_argument("file", type=Path, metavar="FILE")
        bootstrap_option(p)
    bootstrap_option(policies.command("list", list_))
