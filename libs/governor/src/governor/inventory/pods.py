"""A pod's effective requests (Kubernetes' own rule), liveness and readiness."""

from __future__ import annotations

from governor.inventory.names import TERMINATED_PHASES
from governor.inventory.objects import Container, Pod, PodSpec
from governor.inventory.quantities import _add, parse_resources


def container_requests(c: Container) -> dict[str, float]:
    """A container's requests, each missing request taken from its limit."""
    out = parse_resources(c.resources.limits)
    out.update(parse_resources(c.resources.requests))
    return out


def pod_requests(spec: PodSpec) -> dict[str, float]:
    """The pod's effective request per resource, as the scheduler computes it (with sidecars)."""
    app: dict[str, float] = {}
    for c in spec.containers:
        _add(app, container_requests(c))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for c in spec.init_containers:
        req = container_requests(c)
        if c.restart_policy == "Always":
            _add(sidecars, req)
            # a sidecar also counts while the init containers after it run
            continue
        for k, v in req.items():
            init_peak[k] = max(init_peak.get(k, 0.0), v + sidecars.get(k, 0.0))
    total = dict(app)
    _add(total, sidecars)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0.0), v)
    _add(total, parse_resources(spec.overhead))
    return {k: v for k, v in total.items() if v}


def pod_live(pod: Pod) -> bool:
    """Holds resources on its node: not Succeeded/Failed (terminating pods still count)."""
    return pod.status.phase not in TERMINATED_PHASES


def pod_ready(pod: Pod) -> bool:
    """Running, not terminating, and its Ready condition is True."""
    if not pod_live(pod) or pod.metadata.deletion_timestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
