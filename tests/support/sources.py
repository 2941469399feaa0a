"""One collector source run once, for the tests of a single source against its real server."""

from __future__ import annotations

from typing import Any

import msgspec

from governor.events import MetricSample
from governor.spec import TargetRef
from governor_collector.sources import SourceContext, SourceTarget, create_source


def deployment_target(namespace: str, name: str, metric: str) -> SourceTarget:
    """`metric` of the Deployment `namespace/name`."""
    return SourceTarget(
        workload=f"{namespace}/Deployment/{name}",
        metric=metric,
        namespace=namespace,
        target_ref=TargetRef(kind="Deployment", name=name),
    )


async def collect_one(
    target: SourceTarget, spec: msgspec.Struct, now: float, **options: Any
) -> MetricSample:
    """The one sample the source of `spec` gives for `target` at `now`, from a context of its own
    (with `options`, e.g. a kubeconfig) that is closed afterwards, whatever happens."""
    ctx = SourceContext(options=options)
    try:
        (sample,) = await create_source(target, spec, ctx).collect(now)
        return sample
    finally:
        await ctx.close()
