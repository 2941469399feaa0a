"""`governor cluster show` rendering (the table; reading the topic is an integration test)."""

from __future__ import annotations

from rich.console import Console

from governor.events import Device, NodeState
from governor.inventory import summarize_pool
from governor_tools.cli.cluster import render


def test_render_pool_table() -> None:
    gpu = Device(type="gpu", minor=0, pcie="p0", free=100.0, total=100.0)
    half = Device(type="gpu", minor=1, pcie="p0", free=50.0, total=100.0)
    nic = Device(type="rdma", minor=0, pcie="p0", healthy=False, free=1.0, total=1.0)
    nodes = [
        NodeState(
            node="gpu-1",
            pool="train",
            allocatable={"cpu": 32.0, "memory": 64 * 2**30, "nvidia.com/gpu": 2.0},
            requested_managed={"cpu": 4.0, "memory": 8 * 2**30},
            requested_unmanaged={"cpu": 2.0},
            devices=[gpu, half, nic],
        ),
        NodeState(node="cpu-1", pool="web", allocatable={"cpu": 8.0}, schedulable=False),
    ]
    console = Console(record=True, width=200)
    render(summarize_pool(nodes, "train"), console)
    text = console.export_text()
    assert "gpu-1" in text and "cpu-1" not in text
    assert "6/32 [4]" in text  # cpu requested/allocatable [managed]
    assert "8/64Gi [8]" in text
    assert "1/2/2 (150%)" in text  # GPUs free/healthy/all, gpu-core left
    assert "0/0/1" in text  # the unhealthy NIC
    assert "TOTAL" in text
    assert "free for managed work: cpu 26" in text
    everything = Console(record=True, width=200)
    render(summarize_pool(nodes), everything)
    assert "Unschedulable" in everything.export_text()
