"""`governor simulate | compare | traces`: the output files others rely on, format pinned."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import msgspec
import pytest

from governor_tools.sim.policies import default_policy_yaml
from tests.support.cli import governor

ROW_HEADER = ["timestamp", "load", "replicas_requested", "replicas_ready"]
SUMMARY_KEYS = {
    "violation_seconds",
    "unserved_fraction",
    "replica_hours",
    "scale_events",
    "peak_replicas",
    "oracle_gap_closed",
}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    start = 1_700_000_100  # a multiple of 15 s
    rows = [(start + 60 * i, 10.0 if i < 5 else 80.0 if i < 10 else 20.0) for i in range(20)]
    path.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in rows))
    return path


def _out(path: Path) -> list[str]:
    return ["--out", str(path)]


def _c10() -> list[str]:
    return ["--capacity-per-replica", "10"]


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_simulate_with_hpa_baseline_writes_the_promised_files(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    result = governor(
        capsys,
        ["simulate", str(trace), "--capacity-per-replica", "10", "--baseline", "hpa", *_out(out)],
    )
    assert result.code == 0, result.output
    for name in ("replicas.csv", "baseline_replicas.csv"):
        rows = _rows(out / name)
        assert rows[0] == ROW_HEADER
        # 20 rows of 60 s = 1200 s of trace; one row per 15 s step from the first step after it
        # starts (the start is a multiple of 15 s here, so 15 s in) up to its end.
        assert len(rows) - 1 == 1200 // 15 - 1
        steps = [float(r[0]) for r in rows[1:]]
        assert steps[0] == 1_700_000_115
        assert all(b - a == 15 for a, b in itertools.pairwise(steps))
        assert all(int(r[2]) >= 1 and int(r[3]) >= 0 for r in rows[1:])
    summary = msgspec.json.decode((out / "summary.json").read_bytes())
    assert set(summary) == {"governor", "hpa", "oracle"}
    for entry in summary.values():
        assert set(entry) == SUMMARY_KEYS
        assert 0 <= entry["unserved_fraction"] <= 1
    # The jump from 10 to 80 (1 -> 12 replicas at 0.7 × 10 each) is under-provisioned for both.
    assert summary["hpa"]["violation_seconds"] > 0
    assert summary["governor"]["violation_seconds"] < summary["hpa"]["violation_seconds"]
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    assert "violation_seconds" in page
    assert "data:image/png;base64," in page


def test_simulate_without_baseline_has_only_governor(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["simulate", str(trace), "--capacity-per-replica", "10", "--out", str(out)]
    result = governor(capsys, args)
    assert result.code == 0, result.output
    assert not (out / "baseline_replicas.csv").exists()
    assert set(msgspec.json.decode((out / "summary.json").read_bytes())) == {"governor", "oracle"}


def test_compare_runs_every_policy_plus_hpa(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = default_policy_yaml().replace("name: governor-default", "name: slow-down")
    # The scale-down window is the last one in the file.
    head, _, tail = slow.rpartition("stabilizationWindowSeconds: 0")
    assert head, "the default policy has a scale-down window to lengthen"
    slow = head + "stabilizationWindowSeconds: 900" + tail
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(default_policy_yaml())
    b.write_text(slow)
    out = tmp_path / "cmp"
    result = governor(
        capsys,
        ["compare", str(trace), "--policy", str(a), "--policy", str(b), *_c10(), *_out(out)],
    )
    assert result.code == 0, result.output
    summary = msgspec.json.decode((out / "summary.json").read_bytes())
    assert list(summary) == ["governor-default", "slow-down", "hpa", "oracle"]
    # A longer scale-down window can only hold replicas longer.
    assert summary["slow-down"]["replica_hours"] >= summary["governor-default"]["replica_hours"]
    for name in ("governor-default", "slow-down", "hpa"):
        assert _rows(out / f"{name}_replicas.csv")[0] == ROW_HEADER
    assert (out / "report.png").exists()
    assert "slow-down" in result.output


def test_policy_with_another_metric_is_refused_with_the_fix(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(default_policy_yaml().replace("- name: load", "- name: rps"))
    result = governor(
        capsys,
        ["simulate", str(trace), *_c10(), "--policy", str(policy), *_out(tmp_path / "o")],
    )
    assert result.code == 2
    assert "one metric named 'load'" in result.output


def test_bad_trace_header_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time,load\n0,1\n")
    result = governor(
        capsys, ["simulate", str(bad), "--capacity-per-replica", "1", "--out", str(tmp_path / "o")]
    )
    assert result.code == 2
    assert "timestamp,value" in result.output


def test_traces_lists_the_builtins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich's table width: no column cut short
    result = governor(capsys, ["traces"])
    assert result.code == 0, result.output
    for name in ("builtin:alibaba-2018-cpu", "builtin:google-2019-cpu", "builtin:azure-v2-cpu"):
        assert name in result.output
    assert "67242" in result.output  # rows of the 10 s Alibaba file
    assert "held-out:alibaba-2018-disk " in result.output
