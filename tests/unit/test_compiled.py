"""The mypyc build of the hot path (governor.compiled, tools/compile_hot.py): it decides exactly
as the sources do, it is whole or absent, and an old build refuses to load."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from governor import compiled

# Replays a trace through governor's default policy, the reference HPA and the oracle, and
# prints which file the scale policy was loaded from and a digest of every row. With "source",
# a path hook loads libs/governor/src's modules from their .py files only (the builds beside
# them are not seen); other folders (msgspec's own extension modules) load as usual.
REPLAY = """
import hashlib, sys
import importlib.machinery as m
src, mode = sys.argv[1], sys.argv[2]
if mode == "source":
    def sources_only(path):
        if not path.startswith(src):
            raise ImportError(path)
        return m.FileFinder(path, (m.SourceFileLoader, m.SOURCE_SUFFIXES))
    sys.path_hooks.insert(0, sources_only)
    sys.path_importer_cache.clear()
import msgspec
import governor.policy.scale
from governor_tools.sim import traces
from governor_tools.sim.policies import default_policy
from governor_tools.sim.replay import SimConfig
from governor_tools.sim.runs import run_all
load = traces.load("builtin:alibaba-2018-cpu-300s")
config = SimConfig(capacity_per_replica=load.peak / 40, startup_seconds=60)
runs = run_all(load, config, {"governor": default_policy(config).spec}, with_hpa=True)
print(governor.policy.scale.__file__)
print(hashlib.sha256(msgspec.json.encode(runs)).hexdigest())
"""


def replay(mode: str) -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", REPLAY, str(compiled.SRC), mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout.split()
    return out[-2], out[-1]


def test_the_build_decides_exactly_as_the_sources() -> None:
    loaded, digest = replay("default")
    source_loaded, source_digest = replay("source")
    assert source_loaded.endswith(".py")
    if compiled.compiled():  # else both ran the sources: the comparison is trivially equal
        assert loaded.endswith(EXTENSION_SUFFIXES[0])
    assert digest == source_digest


def test_the_build_is_whole_or_absent_and_is_what_runs() -> None:
    built = compiled.compiled()
    if os.environ.get("CI") == "true":
        assert built == list(compiled.HOT), "`make setup` compiles the hot path in CI"
    assert built in ([], list(compiled.HOT))
    builds = {compiled.extension(name) for name in compiled.HOT}
    others = (compiled.SRC / "governor").rglob(f"*{EXTENSION_SUFFIXES[0]}")
    assert [p for p in others if p not in builds] == []  # tools/compile_hot.py removes them
    for name in compiled.HOT:
        file = importlib.import_module(name).__file__ or ""
        assert file.endswith(EXTENSION_SUFFIXES[0] if built else ".py"), name


def make_module(root: Path, name: str, source_at: float, built_at: float | None) -> None:
    src = compiled.source(name, root)
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("x = 1\n")
    os.utime(src, (source_at, source_at))
    if built_at is not None:
        ext = compiled.extension(name, root)
        ext.write_bytes(b"")
        os.utime(ext, (built_at, built_at))


def test_a_build_older_than_its_source_refuses_to_load(tmp_path: Path) -> None:
    names = ("pkg.fresh", "pkg.old", "pkg.sources_only")
    make_module(tmp_path, "pkg.fresh", source_at=1000.0, built_at=2000.0)
    make_module(tmp_path, "pkg.old", source_at=3000.0, built_at=2000.0)
    make_module(tmp_path, "pkg.sources_only", source_at=3000.0, built_at=None)
    assert compiled.compiled(names, tmp_path) == ["pkg.fresh", "pkg.old"]
    assert compiled.stale(names, tmp_path) == ["pkg.old"]
    with pytest.raises(ImportError, match=r"pkg\.old: .* Run `make setup`"):
        compiled.refuse_stale(names, tmp_path)
    compiled.refuse_stale(("pkg.fresh", "pkg.sources_only"), tmp_path)  # nothing stale: loads
    assert "2 of 3 modules" in compiled.describe(names, tmp_path)
    assert "interpreted" in compiled.describe(("pkg.sources_only",), tmp_path)
