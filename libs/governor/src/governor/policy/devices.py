"""Where a replica's GPUs and RDMA NICs can go on one node, as Koordinator's joint allocation does.

How requests map to devices (`device_request`):

* `nvidia.com/gpu: N` asks for N whole GPUs. `koordinator.sh/gpu-core: C` (and
  `koordinator.sh/gpu-memory-ratio`, whichever is larger) is in percent of one GPU: C ≥ 100 asks
  for ceil(C/100) whole GPUs (Koordinator only admits multiples of 100 there), 0 < C < 100 asks
  for a C % share of a single GPU, which several replicas may share. `koordinator.sh/gpu-memory`
  (bytes) is not modelled: the Device objects carry no per-GPU memory.
* `koordinator.sh/rdma: R` asks for ceil(R) distinct NICs, one VF from each. `Device.free` of a
  NIC counts free VFs (a NIC without SR-IOV has total 1: it is one VF, the whole NIC).
* A whole GPU is free when its free share is its whole share; unhealthy devices do not exist.

Joint allocation (`scheduling.koordinator.sh/device-joint-allocate` with `deviceTypes` holding
gpu and rdma) with `requiredScope` SamePCIe or SameNUMA follows Koordinator: the GPUs are
chosen first, then every scope unit (PCIe switch, or NUMA node) that holds one of them must give
one NIC VF from the same unit — so a replica with 4 GPUs over 2 switches takes 2 NICs although it
asked `rdma: 1`; a unit without a free NIC cannot hold its GPUs. Without a required scope
Koordinator only *prefers* closeness and never fails for it, so feasibility is the Node scope:
GPUs anywhere, ceil(R) NICs anywhere (NICs next to the GPUs first).

Choices are best-fit so that later replicas still find room: a replica's GPUs go to the single
unit with the fewest free GPUs that holds them all, else over the fewest units (largest first);
NICs come from the ones with the fewest free VFs. It is a heuristic (exact per-node packing is a
bin-packing problem), deterministic, and every placement it returns is valid for its scope.

A node's devices are reduced to a `Shape` that drops names (minors, PCIe ids) and keeps only
topology ranks and free amounts, so that nodes that look alike share one cached computation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Literal

import msgspec

from governor.events import Device, NodeState

Scope = Literal["SamePCIe", "SameNUMA", "Node"]

GPU = "nvidia.com/gpu"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
GPU_MEMORY = "koordinator.sh/gpu-memory"
RDMA = "koordinator.sh/rdma"
# Satisfied by Device objects, never by the node's scalar allocatable.
DEVICE_RESOURCES = frozenset({GPU, GPU_CORE, GPU_MEMORY_RATIO, GPU_MEMORY, RDMA})

WHOLE = 100.0  # one GPU, in gpu-core percent
_EPS = 1e-9

# One PCIe switch: (rank of its NUMA node on the node, free share % per healthy GPU by minor,
# free VFs per healthy NIC by minor).
GroupShape = tuple[int, tuple[float, ...], tuple[int, ...]]
Shape = tuple[GroupShape, ...]
# The minors behind a Shape, group by group: (GPU minors, NIC minors).
Layout = tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
# Positions in a Shape: (group index, index within the group's GPUs or NICs).
Position = tuple[int, int]


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What one replica needs of a node's devices."""

    gpus: int = 0  # whole GPUs
    gpu_share: float = 0.0  # percent of one GPU, in (0, 100); 0 when whole GPUs are asked
    nics: int = 0
    scope: Scope = "Node"

    @property
    def empty(self) -> bool:
        return self.gpus == 0 and self.gpu_share == 0.0 and self.nics == 0

    @property
    def gpu_units(self) -> float:
        """GPUs this replica occupies, fractional for a share (what fair share counts)."""
        return self.gpus + self.gpu_share / WHOLE


class Placed(msgspec.Struct, frozen=True, array_like=True):
    """A replica's devices on one node, as positions in the Shape it was placed on."""

    shape: Shape  # the node's shape after this replica
    gpus: tuple[Position, ...]
    nics: tuple[Position, ...]


def device_request(
    requests: Mapping[str, float], joint_allocate: Mapping[str, Any] | None = None
) -> DeviceRequest:
    whole = requests.get(GPU, 0.0)
    share = max(requests.get(GPU_CORE, 0.0), requests.get(GPU_MEMORY_RATIO, 0.0))
    gpus = math.ceil(whole - _EPS) if whole > 0 else 0
    gpu_share = 0.0
    if share >= WHOLE - _EPS:
        gpus = max(gpus, math.ceil(share / WHOLE - _EPS))
    elif share > 0 and gpus == 0:
        gpu_share = share
    rdma = requests.get(RDMA, 0.0)
    nics = math.ceil(rdma - _EPS) if rdma > 0 else 0
    scope: Scope = "Node"
    if joint_allocate:
        types = set(joint_allocate.get("deviceTypes") or ())
        required = joint_allocate.get("requiredScope")
        if {"gpu", "rdma"} <= types and required in ("SamePCIe", "SameNUMA"):
            scope = "SamePCIe" if required == "SamePCIe" else "SameNUMA"
    return DeviceRequest(gpus=gpus, gpu_share=gpu_share, nics=nics, scope=scope)


def topology(devices: Iterable[Device]) -> tuple[Shape, Layout]:
    """A node's healthy GPUs and NICs as a Shape (what placement sees) and its Layout (minors)."""
    groups: dict[tuple[int, int, str], tuple[list[tuple[int, float]], list[tuple[int, int]]]] = {}
    for d in devices:
        if not d.healthy or d.type not in ("gpu", "rdma"):
            continue
        gpus, nics = groups.setdefault((d.socket, d.numa, d.pcie), ([], []))
        if d.type == "gpu":
            pct = WHOLE * d.free / d.total if d.total > 0 else 0.0
            gpus.append((d.minor, min(WHOLE, max(0.0, pct))))
        else:
            nics.append((d.minor, max(0, math.floor(d.free + _EPS))))
    numa_rank = {k: i for i, k in enumerate(sorted({(s, n) for s, n, _ in groups}))}
    shape: list[GroupShape] = []
    layout: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for key in sorted(groups):
        gpus, nics = groups[key]
        gpus.sort()
        nics.sort()
        shape.append((numa_rank[key[:2]], tuple(f for _, f in gpus), tuple(v for _, v in nics)))
        layout.append((tuple(m for m, _ in gpus), tuple(m for m, _ in nics)))
    return tuple(shape), tuple(layout)


def minors(layout: Layout, placed: Placed) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The GPU and NIC minors a placement took on the node this layout describes."""
    return (
        tuple(layout[g][0][i] for g, i in placed.gpus),
        tuple(layout[g][1][i] for g, i in placed.nics),
    )


def _units(shape: Shape, scope: Scope) -> list[list[int]]:
    """Group indices per scope unit, in shape order."""
    if scope == "SamePCIe":
        return [[g] for g in range(len(shape))]
    if scope == "SameNUMA":
        by_numa: dict[int, list[int]] = {}
        for g, (numa, _, _) in enumerate(shape):
            by_numa.setdefault(numa, []).append(g)
        return [by_numa[k] for k in sorted(by_numa)]
    return [list(range(len(shape)))]


def _whole_free(shape: Shape, groups: list[int]) -> list[Position]:
    return [(g, i) for g in groups for i, f in enumerate(shape[g][1]) if f >= WHOLE - _EPS]


def _nics_free(shape: Shape, groups: list[int]) -> list[Position]:
    return [(g, i) for g in groups for i, v in enumerate(shape[g][2]) if v >= 1]


def _best_nic(shape: Shape, candidates: list[Position]) -> Position:
    return min(candidates, key=lambda p: (shape[p[0]][2][p[1]], p))


def _pick_gpus(shape: Shape, units: list[list[int]], req: DeviceRequest) -> list[list[Position]]:
    """GPUs per unit used (empty when they do not fit): best fit, else fewest units."""
    if req.gpu_share > 0:
        fits = [
            (f, u, (g, i))
            for u, groups in enumerate(units)
            for g in groups
            for i, f in enumerate(shape[g][1])
            if f >= req.gpu_share - _EPS
        ]
        if not fits:
            return []
        return [[min(fits)[2]]]
    free = [_whole_free(shape, groups) for groups in units]
    single = [(len(f), u) for u, f in enumerate(free) if len(f) >= req.gpus]
    if single:
        _, u = min(single)
        return [free[u][: req.gpus]]
    picked: list[list[Position]] = []
    need = req.gpus
    for u in sorted(range(len(units)), key=lambda u: (-len(free[u]), u)):
        if need == 0 or not free[u]:
            break
        take = free[u][:need]
        picked.append(take)
        need -= len(take)
    return picked if need == 0 else []


def _apply(shape: Shape, req: DeviceRequest, gpus: list[Position], nics: list[Position]) -> Shape:
    new = [(numa, list(g), list(n)) for numa, g, n in shape]
    take = req.gpu_share if req.gpu_share > 0 else WHOLE
    for g, i in gpus:
        new[g][1][i] = max(0.0, new[g][1][i] - take)
    for g, i in nics:
        new[g][2][i] -= 1
    return tuple((numa, tuple(g), tuple(n)) for numa, g, n in new)


@lru_cache(maxsize=1 << 16)
def place(shape: Shape, req: DeviceRequest) -> Placed | None:
    """One replica's devices on a node of this shape, or None when they do not fit."""
    if req.empty:
        return Placed(shape, (), ())
    wants_gpu = req.gpus > 0 or req.gpu_share > 0
    if req.scope != "Node" and wants_gpu and req.nics > 0:
        # Only units with a free NIC may hold GPUs; each unit used gives one NIC VF.
        units = [groups for groups in _units(shape, req.scope) if _nics_free(shape, groups)]
        per_unit = _pick_gpus(shape, units, req)
        if not per_unit:
            return None
        gpus = [p for used in per_unit for p in used]
        nics = []
        for used in per_unit:
            unit = next(groups for groups in units if used[0][0] in groups)
            nics.append(_best_nic(shape, _nics_free(shape, unit)))
        return Placed(_apply(shape, req, gpus, nics), tuple(gpus), tuple(nics))
    gpus = []
    if wants_gpu:
        per_unit = _pick_gpus(shape, _units(shape, "SamePCIe"), req)
        if not per_unit:
            return None
        gpus = [p for used in per_unit for p in used]
    nics = []
    if req.nics > 0:
        near = {g for g, _ in gpus}
        candidates = _nics_free(shape, list(range(len(shape))))
        if len(candidates) < req.nics:
            return None
        candidates.sort(key=lambda p: (p[0] not in near, shape[p[0]][2][p[1]], p))
        nics = candidates[: req.nics]
    return Placed(_apply(shape, req, gpus, nics), tuple(gpus), tuple(nics))


@lru_cache(maxsize=1 << 14)
def count_fit(shape: Shape, req: DeviceRequest, limit: int) -> int:
    """How many replicas' devices fit, one after another, on a node of this shape (≤ limit)."""
    n = 0
    while n < limit:
        placed = place(shape, req)
        if placed is None:
            break
        shape = placed.shape
        n += 1
    return n


def fit_count(nodes: Iterable[NodeState], req: DeviceRequest, limit: int = 1 << 20) -> int:
    """How many more replicas' devices a pool can place (nodes that look alike computed once)."""
    if req.empty:
        return limit
    shapes = Counter(topology(n.devices)[0] for n in nodes if n.ready and n.schedulable)
    total = 0
    for shape, alike in sorted(shapes.items()):
        total += count_fit(shape, req, limit) * alike
        if total >= limit:
            return limit
    return total
