"""GPU + RDMA placement: request mapping, scope validity, and exact feasibility on one node."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from governor.events import Device, NodeState
from governor.policy import devices as dev
from governor.policy.devices import DeviceRequest, Scope

JOINT_PCIE = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


def gpu(minor: int, numa: int, pcie: str, free: float = 100.0, healthy: bool = True) -> Device:
    return Device(
        type="gpu", minor=minor, numa=numa, socket=numa, pcie=pcie, free=free, total=100.0,
        healthy=healthy,
    )  # fmt: skip


def nic(minor: int, numa: int, pcie: str, free: float = 1.0, healthy: bool = True) -> Device:
    return Device(
        type="rdma", minor=minor, numa=numa, socket=numa, pcie=pcie, free=free,
        total=max(1.0, free), healthy=healthy,
    )  # fmt: skip


# --- how requests map to devices --------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ({dev.GPU: 2}, DeviceRequest(gpus=2)),
        ({dev.GPU_CORE: 200}, DeviceRequest(gpus=2)),
        ({dev.GPU_CORE: 150}, DeviceRequest(gpus=2)),
        ({dev.GPU_CORE: 50}, DeviceRequest(gpu_share=50)),
        ({dev.GPU_CORE: 30, dev.GPU_MEMORY_RATIO: 60}, DeviceRequest(gpu_share=60)),
        ({dev.GPU: 1, dev.GPU_CORE: 100, dev.GPU_MEMORY_RATIO: 100}, DeviceRequest(gpus=1)),
        ({dev.RDMA: 1}, DeviceRequest(nics=1)),
        ({dev.RDMA: 2}, DeviceRequest(nics=2)),
        ({"cpu": 4, "memory": 1e9}, DeviceRequest()),
    ],
)
def test_requests_map_to_devices(requests: dict[str, float], expected: DeviceRequest) -> None:
    assert dev.device_request(requests) == expected


@pytest.mark.parametrize(
    ("joint", "scope"),
    [
        (None, "Node"),
        ({"deviceTypes": ["gpu", "rdma"]}, "Node"),  # a preference only: never fails for it
        (JOINT_PCIE, "SamePCIe"),
        ({"deviceTypes": ["gpu", "rdma"], "requiredScope": "SameNUMA"}, "SameNUMA"),
        ({"deviceTypes": ["gpu"], "requiredScope": "SamePCIe"}, "Node"),  # nothing to join
    ],
)
def test_joint_allocate_annotation_sets_the_scope(
    joint: dict[str, object] | None, scope: str
) -> None:
    assert dev.device_request({dev.GPU: 1, dev.RDMA: 1}, joint).scope == scope


def test_unhealthy_devices_do_not_exist() -> None:
    shape, layout = dev.topology([gpu(0, 0, "a", healthy=False), gpu(1, 0, "a"), nic(0, 0, "a")])
    assert layout == (((1,), (0,)),)
    assert shape == ((0, (100.0,), (1,)),)


# --- Koordinator's examples (docs/proposals/scheduling/20230803-device-allocate-hint-apis.md) --


def test_samepcie_takes_one_nic_per_switch_its_gpus_use() -> None:
    # 8 PCIe switches, each with one GPU and one NIC: 4 GPUs + "rdma: 1" get 4 NICs, pairwise.
    devices = [d for i in range(8) for d in (gpu(i, i // 4, f"p{i}"), nic(i, i // 4, f"p{i}"))]
    shape, layout = dev.topology(devices)
    placed = dev.place(shape, dev.device_request({dev.GPU: 4, dev.RDMA: 1}, JOINT_PCIE))
    assert placed is not None
    gpus, nics = dev.minors(layout, placed)
    assert len(gpus) == 4
    assert sorted(nics) == sorted(gpus)  # GPU i and NIC i share switch p{i}


def test_heterogeneous_numa_gives_one_nic_without_a_required_scope() -> None:
    # 2 NUMA nodes x 4 switches, one GPU each, only one switch with a NIC.
    devices = [gpu(i, i // 4, f"p{i}") for i in range(8)] + [nic(0, 0, "p0")]
    shape, _ = dev.topology(devices)
    preferred = dev.place(
        shape, dev.device_request({dev.GPU: 4, dev.RDMA: 1}, {"deviceTypes": ["gpu", "rdma"]})
    )
    assert preferred is not None
    assert (len(preferred.gpus), len(preferred.nics)) == (4, 1)
    assert dev.place(shape, dev.device_request({dev.GPU: 4, dev.RDMA: 1}, JOINT_PCIE)) is None
    assert dev.place(shape, dev.device_request({dev.GPU: 1, dev.RDMA: 1}, JOINT_PCIE)) is not None


def test_best_fit_keeps_whole_switches_for_later_replicas() -> None:
    # 4 switches x 2 GPUs, one single-VF NIC each: 2-GPU SamePCIe replicas must not straddle.
    devices = [gpu(i, i // 4, f"p{i // 2}") for i in range(8)]
    devices += [nic(s, s // 2, f"p{s}") for s in range(4)]
    shape, _ = dev.topology(devices)
    req = dev.device_request({dev.GPU: 2, dev.RDMA: 1}, JOINT_PCIE)
    assert dev.count_fit(shape, req, 100) == 4
    nodes = [NodeState(node=f"n{i}", pool="p", allocatable={}, devices=devices) for i in range(3)]
    assert dev.fit_count(nodes, req) == 12


# --- properties -------------------------------------------------------------------------------


@st.composite
def node_devices(draw: st.DrawFn) -> list[Device]:
    """Up to 2 NUMA nodes x 2 switches, 0-3 GPUs and 0-2 NICs per switch, some taken or broken."""
    out: list[Device] = []
    g = n = 0
    for numa in range(draw(st.integers(1, 2))):
        for sw in range(draw(st.integers(1, 2))):
            pcie = f"{numa}-{sw}"
            for _ in range(draw(st.integers(0, 3))):
                free = draw(st.sampled_from([100.0, 100.0, 50.0, 25.0, 0.0]))
                out.append(gpu(g, numa, pcie, free, healthy=draw(st.integers(0, 4)) > 0))
                g += 1
            for _ in range(draw(st.integers(0, 2))):
                out.append(
                    nic(
                        n,
                        numa,
                        pcie,
                        float(draw(st.sampled_from([0, 1, 1, 2]))),
                        healthy=draw(st.integers(0, 5)) > 0,
                    )
                )
                n += 1
    return out


requests = st.builds(
    lambda whole, share, nics, scope: DeviceRequest(
        gpus=whole if share == 0 else 0, gpu_share=float(share), nics=nics, scope=scope
    ),
    st.integers(0, 4),
    st.sampled_from([0, 0, 0, 25, 50, 75]),
    st.integers(0, 2),
    st.sampled_from(["Node", "SamePCIe", "SameNUMA"]),
)


def _unit(d: Device, scope: Scope) -> tuple[object, ...]:
    return {"SamePCIe": (d.socket, d.numa, d.pcie), "SameNUMA": (d.socket, d.numa), "Node": ()}[
        scope
    ]


def _joint(req: DeviceRequest) -> bool:
    return req.scope != "Node" and req.nics > 0 and (req.gpus > 0 or req.gpu_share > 0)


def _check_valid(
    devices: list[Device],
    req: DeviceRequest,
    gpus: tuple[int, ...],
    nics: tuple[int, ...],
    gpu_free: dict[int, float],
    vfs: dict[int, int],
) -> None:
    """Independent of the code under test: the placement obeys the request and its scope."""
    by_gpu = {d.minor: d for d in devices if d.type == "gpu"}
    by_nic = {d.minor: d for d in devices if d.type == "rdma"}
    assert len(set(gpus)) == len(gpus) and len(set(nics)) == len(nics)
    assert all(by_gpu[m].healthy for m in gpus) and all(by_nic[m].healthy for m in nics)
    take = req.gpu_share if req.gpu_share > 0 else 100.0
    assert len(gpus) == (1 if req.gpu_share > 0 else req.gpus)
    assert all(gpu_free[m] >= take - 1e-9 for m in gpus)
    assert all(vfs[m] >= 1 for m in nics)
    if _joint(req):
        gpu_units = {_unit(by_gpu[m], req.scope) for m in gpus}
        nic_units = [_unit(by_nic[m], req.scope) for m in nics]
        assert sorted(map(repr, nic_units)) == sorted(map(repr, gpu_units))  # one NIC per unit
    else:
        assert len(nics) == req.nics


def _exists(
    devices: list[Device], req: DeviceRequest, gpu_free: dict[int, float], vfs: dict[int, int]
) -> bool:
    """Whether any valid placement exists, decided from counts (no search needed)."""
    ok_gpus = [d for d in devices if d.type == "gpu" and d.healthy]
    ok_nics = [d for d in devices if d.type == "rdma" and d.healthy and vfs[d.minor] >= 1]
    need = req.gpu_share if req.gpu_share > 0 else 100.0
    if _joint(req):
        units_with_nic = {_unit(d, req.scope) for d in ok_nics}
        usable = [
            d
            for d in ok_gpus
            if _unit(d, req.scope) in units_with_nic and gpu_free[d.minor] >= need - 1e-9
        ]
        return len(usable) >= (1 if req.gpu_share > 0 else req.gpus)
    wanted_gpus = 1 if req.gpu_share > 0 else req.gpus
    usable_gpus = [d for d in ok_gpus if gpu_free[d.minor] >= need - 1e-9]
    return len(usable_gpus) >= wanted_gpus and len(ok_nics) >= req.nics


@settings(max_examples=300, deadline=None)
@given(node_devices(), st.lists(requests, min_size=1, max_size=12))
def test_every_placement_is_valid_and_found_whenever_one_exists(
    devices: list[Device], reqs: list[DeviceRequest]
) -> None:
    shape, layout = dev.topology(devices)
    healthy = {(d.type, d.minor): d.healthy for d in devices}
    gpu_free = {
        d.minor: d.free if healthy[("gpu", d.minor)] else 0.0 for d in devices if d.type == "gpu"
    }
    vfs = {d.minor: int(d.free) for d in devices if d.type == "rdma"}
    for req in reqs:
        placed = dev.place(shape, req)
        assert (placed is not None) == _exists(devices, req, gpu_free, vfs)
        if placed is None:
            continue
        gpus, nics = dev.minors(layout, placed)
        _check_valid(devices, req, gpus, nics, gpu_free, vfs)
        for m in gpus:
            gpu_free[m] -= req.gpu_share if req.gpu_share > 0 else 100.0
        for m in nics:
            vfs[m] -= 1
        shape = placed.shape
    assert all(f >= -1e-9 for f in gpu_free.values()) and all(v >= 0 for v in vfs.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(node_devices(), min_size=1, max_size=6), requests)
def test_pool_count_is_the_sum_of_nodes_placed_one_by_one(
    layouts: list[list[Device]], req: DeviceRequest
) -> None:
    # Alike nodes are computed once; the answer must not depend on it.
    assume(not req.empty)
    nodes = [
        NodeState(node=f"n{i}", pool="p", allocatable={}, devices=d) for i, d in enumerate(layouts)
    ]
    by_hand = 0
    for d in layouts:
        shape, _ = dev.topology(d)
        while (placed := dev.place(shape, req)) is not None and by_hand < 10_000:
            shape = placed.shape
            by_hand += 1
    assert dev.fit_count(nodes, req) == by_hand
    assert dev.fit_count(nodes + nodes[:1], req) == by_hand + dev.fit_count(nodes[:1], req)


def test_counts_follow_topology_per_scope() -> None:
    # NUMA 0: 4 GPUs on switches p0, p1 and one NIC with 2 VFs on p0; NUMA 1: 4 GPUs, no NIC.
    # 2 GPUs + a NIC: SamePCIe only on p0 (once); SameNUMA on NUMA 0 (twice, a VF each); Node
    # anywhere, but the 2 VFs bound it to two. Without RDMA, all four GPU pairs.
    devices = [gpu(i, 0, f"p{i // 2}") for i in range(4)]
    devices += [gpu(4 + i, 1, f"p{2 + i // 2}") for i in range(4)]
    devices += [nic(0, 0, "p0", free=2.0)]
    shape, _ = dev.topology(devices)

    def fits(scope: str) -> int:
        joint = {"deviceTypes": ["gpu", "rdma"], "requiredScope": scope}
        return dev.count_fit(shape, dev.device_request({dev.GPU: 2, dev.RDMA: 1}, joint), 100)

    assert (fits("SamePCIe"), fits("SameNUMA"), fits("Node")) == (1, 2, 2)
    no_rdma = dev.device_request({dev.GPU: 2})
    assert dev.count_fit(shape, no_rdma, 100) == 4
    assert dev.place(shape, DeviceRequest(gpus=9)) is None


def test_placement_is_deterministic_and_cached_by_shape() -> None:
    a = [gpu(i, 0, f"x{i // 2}") for i in range(4)] + [nic(0, 0, "x0"), nic(1, 0, "x1")]
    b = [gpu(i + 10, 0, f"y{i // 2}") for i in range(4)] + [nic(5, 0, "y0"), nic(6, 0, "y1")]
    (sa, la), (sb, lb) = dev.topology(a), dev.topology(b)
    assert sa == sb  # names differ, the shape does not
    req = dev.device_request({dev.GPU: 2, dev.RDMA: 1}, JOINT_PCIE)
    pa, pb = dev.place(sa, req), dev.place(sb, req)
    assert pa is not None and pa == pb
    assert dev.minors(la, pa) == ((0, 1), (0,)) and dev.minors(lb, pa) == ((10, 11), (5,))


def test_nics_default_to_vf_count() -> None:
    shape, _ = dev.topology([nic(0, 0, "a", free=3.0)])
    assert dev.count_fit(shape, DeviceRequest(nics=1), 100) == 3
    assert dev.count_fit(shape, DeviceRequest(nics=2), 100) == 0  # two distinct NICs needed
