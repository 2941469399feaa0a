"""The demo's pure parts: time compression, trace segments, objects, the metrics API's helpers."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from governor.inventory import (
    DEVICE_JOINT_ALLOCATE,
    PodSpec,
    parse_selector_string,
    pod_requests,
    selector_matches,
)
from governor.spec import policy_from_obj
from governor_tools.demo import hpa_twin
from governor_tools.demo import scenario as sc
from governor_tools.demo.report import live_summary, shrinks, sim_policy, summary, verdict
from governor_tools.demo.run import Sample
from governor_tools.demo.stack import Busy, exclusive
from governor_tools.sim.traces import from_rows


def test_time_scale_divides_durations_and_rounds_hpa_integers() -> None:
    ts = sc.TimeScale(10.0)
    assert ts.wall(60.0) == 6.0
    assert ts.whole(20, at_least=1) == 2
    assert ts.whole(0) == 0  # a zero window stays zero
    assert sc.TimeScale(60.0).whole(20, at_least=1) == 1  # a period is never 0
    assert any("10 trace-seconds per second" in line for line in ts.describe())
    with pytest.raises(ValueError, match="--speed"):
        sc.TimeScale(0.5)


@pytest.mark.parametrize("speed", [1.0, 4.0, 10.0, 30.0])
def test_policies_are_valid_at_every_speed(speed: float) -> None:
    ts = sc.TimeScale(speed)
    for s in sc.SERVICES:
        p = policy_from_obj(sc.web_policy(s, ts))
        assert p.spec.panic is not None
        assert p.spec.panic.window_seconds == pytest.approx(sc.TRACE_PANIC_WINDOW / speed)
        # the twin HPA's one metric and target: the A/B's arms differ only in the controller
        (metric,) = p.spec.metrics
        assert (metric.name, metric.target.target_value()) == (sc.METRIC, sc.TARGET_PER_POD)
        down = p.spec.behavior.scale_down if p.spec.behavior else None
        assert down is not None and down.stabilization_window_seconds == round(60 / speed)
    job = policy_from_obj(sc.training_policy(sc.TRAINING, ts))
    assert job.spec.elastic is not None
    assert job.spec.elastic.min_resize_interval_seconds == pytest.approx(60.0 / speed)
    assert job.spec.target_ref.kind == "PyTorchJob"


def test_training_pods_ask_for_a_gpu_and_an_rdma_vf_jointly() -> None:
    obj = sc.pytorchjob_obj(sc.TRAINING, 3)
    worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    tpl = worker["template"]
    joint = json.loads(tpl["metadata"]["annotations"][DEVICE_JOINT_ALLOCATE])
    assert joint == {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}
    req = pod_requests(msgspec.convert(tpl["spec"], PodSpec))
    assert req["nvidia.com/gpu"] == 1 and req["koordinator.sh/rdma"] == 1 and req["cpu"] == 8


def test_device_objects_pair_each_nic_with_a_pcie_switch_of_gpus() -> None:
    devices = sc.device_obj("n")["spec"]["devices"]
    gpus = [d for d in devices if d["type"] == "gpu"]
    nics = [d for d in devices if d["type"] == "rdma"]
    assert len(gpus) == sc.GPUS_PER_NODE and len(nics) == sc.NICS_PER_NODE
    for nic in nics:
        same = [g for g in gpus if g["topology"]["pcieID"] == nic["topology"]["pcieID"]]
        assert len(same) == sc.GPUS_PER_NODE // sc.NICS_PER_NODE
        assert len(nic["vfGroups"][0]["vfs"]) == sc.VFS_PER_NIC


def test_segments_rise_to_a_peak_and_fall_back() -> None:
    # flat, then a hill at rows 40..60, then flat: the hill must be chosen
    values = [10.0] * 40 + [10.0 + min(i, 20 - i) for i in range(21)] + [10.0] * 40
    (start,) = sc.pick_segments(values, 30, 1)
    seg = values[start : start + 30]
    peak = seg.index(max(seg))
    assert max(seg) == 20.0 and 6 <= peak <= 24


def test_segments_do_not_overlap_and_map_onto_base_and_peak() -> None:
    trace = from_rows("t", [i * 10.0 for i in range(400)], [float(i % 50) for i in range(400)])
    segs = sc.segments(trace, 300.0)
    starts = sorted(s.start for s in segs.values())
    assert starts[1] - starts[0] >= segs["frontend"].rows
    for s in sc.SERVICES:
        seg = segs[s.name]
        values = [seg.value(i) for i in range(seg.rows)]
        assert min(values) == pytest.approx(s.base_load)
        assert max(values) == pytest.approx(s.peak_load)
        assert seg.at(-5) == seg.value(0) and seg.at(1e9) == seg.value(seg.rows - 1)
        assert seg.at(25.0) == seg.value(2)  # held per 10 s row


def test_label_selector_matching() -> None:
    """The selectors the demo's metrics API (kubectl top, the HPA twin) is asked for."""
    labels = {"app": "web", "tier": "front"}

    def matches(text: str) -> bool:
        return selector_matches(parse_selector_string(text), labels)

    assert matches("")
    assert matches("app=web,tier==front")
    assert not matches("app=db")
    assert not matches("tier!=front")
    assert matches("app") and not matches("zone")


def test_live_summary_counts_violation_in_trace_seconds() -> None:
    def row(t: float, load: float, ready: int) -> Sample:
        return Sample(t / 10, t, "w", load, ready, ready, ready, 0)

    rows = [row(0, 50, 5), row(10, 80, 5), row(20, 80, 8), row(30, 0, 8)]
    s = live_summary(rows)
    assert s.violation_seconds == 10  # only [10, 20): 80 > 5 x 10
    assert s.unserved_fraction == pytest.approx(300 / (500 + 800 + 800))
    assert s.peak_replicas == 8
    assert s.scale_events == 1  # 5 -> 8
    assert s.peak_need_replicas == 12  # ceil(80 / 7)


def test_each_twin_has_the_services_bounds_behavior_and_a_delayed_total_metric() -> None:
    ts = sc.TimeScale(10.0)
    for s, t in zip(sc.SERVICES, hpa_twin.TWINS, strict=True):
        hpa = hpa_twin.hpa_obj(s, ts)
        spec = hpa["spec"]
        assert spec["scaleTargetRef"]["name"] == t.name == s.name + "-hpa"
        assert (spec["minReplicas"], spec["maxReplicas"]) == (s.min_replicas, s.max_replicas)
        assert spec["behavior"] == sc.web_policy(s, ts)["spec"]["behavior"]
        (metric,) = spec["metrics"]
        labels = metric["external"]["metric"]["selector"]["matchLabels"]
        assert labels["governor.dev/name"] == t.name
        assert labels["governor.dev/statistic"] == "total"
        assert labels["governor.dev/delay-seconds"] == "1.5"  # one 15 s sync at 10x
        assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "7000m"}
    # its own pool: no node of the twins' pool is one of governor's
    assert not set(hpa_twin.node_names()) & set(sc.node_names())
    assert all(
        hpa_twin.node_obj(n)["metadata"]["labels"]["governor.dev/pool"] == hpa_twin.POOL
        for n in hpa_twin.node_names()
    )
    assert hpa_twin.service_of("frontend-hpa") == "frontend" == hpa_twin.service_of("frontend")


def test_the_simulated_twin_is_the_twins_hpa_in_trace_time() -> None:
    for s in sc.SERVICES:
        sim = hpa_twin.sim_policy(s)
        hpa = hpa_twin.hpa_obj(s, sc.TimeScale(1.0))["spec"]
        assert (sim.min_replicas, sim.max_replicas) == (hpa["minReplicas"], hpa["maxReplicas"])
        assert msgspec.to_builtins(sim.behavior) == msgspec.to_builtins(
            policy_from_obj(sc.web_policy(s, sc.TimeScale(1.0))).spec.behavior
        )
        (metric,) = sim.metrics
        assert metric.name == "load" and metric.target.type == "AverageValue"
        assert metric.target.target_value() == sc.TARGET_PER_POD
        assert sim.panic is None  # HPA has no panic mode
    assert hpa_twin.SIM_PIPELINE.stable_seconds == sc.TRACE_STABLE_WINDOW  # selector window
    assert hpa_twin.SIM_PIPELINE.delay_seconds == 15.0  # the selector's delay, in trace-s


def test_sim_agreement_counts_the_trace_seconds_within_one_replica() -> None:
    from governor_tools.demo.report import sim_agreement
    from governor_tools.sim.replay import Run, StepRow, Summary

    def live(t: float, spec: int) -> Sample:
        return Sample(t / 10, t, "w", 0.0, spec, spec, spec, 0)

    rows = [live(0, 4), live(10, 8), live(20, 8), live(40, 8)]  # 4 on [0, 10), then 8
    run = Run("hpa", 15.0, [StepRow(15, 0, 6, 6), StepRow(30, 0, 8, 8)], Summary(0, 0, 0, 0, 0))
    # sim: 4 (initial) on [0, 15), 6 on [15, 30), 8 on [30, 40); apart by > 1 on [10, 30)
    assert sim_agreement(rows, run) == pytest.approx(20 / 40)


def _timeline(job: list[int], load: float) -> list[Sample]:
    rows = []
    for i, workers in enumerate(job):
        t = 10.0 * i
        rows.append(Sample(t, t, sc.TRAINING.workload, 8, workers, workers, workers, workers))
        for s in sc.SERVICES:
            rows.append(Sample(t, t, s.workload, load, 2, 2, 2, workers))
    return rows


def test_a_shrink_is_judged_against_the_services_need_at_target() -> None:
    # 2 x ceil(140 / 7) x 2 cpu = 80 cpu needed; 128 - 8 x 8 = 64 free beside 8 workers
    (needed,) = shrinks(_timeline([8, 8, 5, 5], 140.0))
    assert (needed.before, needed.after, needed.need_cpu, needed.free_cpu) == (8, 5, 80, 64)
    assert needed.needed
    (idle,) = shrinks(_timeline([8, 6, 6], 14.0))
    assert not idle.needed and idle.need_cpu == 8


def test_summary_json_holds_the_three_arms_per_service_and_only_numbers_beside() -> None:
    from governor_tools.demo.report import sim_config
    from governor_tools.sim.runs import HPA, run_all

    rows = _timeline([8, 8, 5, 5], 140.0)
    by_wl: dict[str, list[Sample]] = {}
    for r in rows:
        by_wl.setdefault(r.workload, []).append(r)
    for t in hpa_twin.TWINS:
        by_wl[t.workload] = [msgspec.structs.replace(r, workload=t.workload)
                             for r in by_wl[sc.SERVICES[0].workload]]  # fmt: skip
    trace = from_rows("x", [0.0, 10.0, 20.0, 30.0], [140.0] * 4, step=10.0)
    sims = {s.name: {HPA: run_all(trace, sim_config(), {}, with_hpa=True)[0]}
            for s in sc.SERVICES}  # fmt: skip
    out = json.loads(json.dumps(summary(by_wl, sims)))
    for s in sc.SERVICES:
        assert set(out[s.name]) == {"governor", "hpa_live", "hpa_sim"}
        for arm in out[s.name].values():
            for key in ("violation_seconds", "replica_hours", "scale_events", "peak_replicas"):
                assert isinstance(arm[key], int | float)
        gov = out[s.name]["governor"]
        assert gov["peak_over_need"] == gov["peak_replicas"] / gov["peak_need_replicas"]
    others = {k: v for k, v in out.items() if k not in {s.name for s in sc.SERVICES}}
    assert others == {
        "training_shrinks": 1,
        "training_shrinks_needed": 1,
        # when and why: the services' need at target against the cpu free beside the job
        "training_shrink_log": [
            {"trace_seconds": 20.0, "before": 8, "after": 5, "need_cpu": 80.0,
             "free_cpu": 64.0, "needed": True}
        ],
    }  # fmt: skip
    lines = verdict(by_wl, sims)
    assert lines[0].startswith("must-show frontend: peak spec replicas 2, need at target")
    assert "1 shrinks, 1 while the services' need" in lines[-2] and "(met:" in lines[-2]
    assert lines[-1].startswith("  training job 8→5 workers at trace 20 s")


def test_simulated_policy_keeps_the_demo_behavior_on_the_total_load() -> None:
    spec = sim_policy(sc.SERVICES[0])
    assert [m.name for m in spec.metrics] == ["load"]
    assert (
        spec.behavior
        == policy_from_obj(sc.web_policy(sc.SERVICES[0], sc.TimeScale(1))).spec.behavior
    )


def test_one_demo_per_machine(tmp_path: Path) -> None:
    lock = tmp_path / "demo.lock"
    busy = r"another governor demo is running \(pid \d+"
    with exclusive(lock), pytest.raises(Busy, match=busy), exclusive(lock):
        pass
    with exclusive(lock):  # released
        pass
