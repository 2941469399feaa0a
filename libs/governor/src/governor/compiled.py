"""The decision hot path, compiled with mypyc where the machine can (`tools/compile_hot.py`,
run by `make setup`), and a guard against running an old build of it.

Every workload's load message runs the scale policy and the decider's stage 1 (about 25 µs in
the interpreter): compiled, the same code runs about 1.3× as fast (docs/simulation.md, "The
compiled hot path"). The sources stay the truth: the extension modules are built beside them,
ignored by git, and Python imports an extension before a source of the same name. Left out:
modules that define msgspec Structs decoded from the wire or a checkpoint (`policy.types`,
`cores.decider_memory`): msgspec reads a compiled class's annotations differently and refuses
their fields.

A compiled module older than its source would run code that is no longer in the tree, silently;
importing governor then fails with what to run instead (`refuse_stale`).
"""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

HOT: tuple[str, ...] = (
    "governor.policy.behavior",
    "governor.policy.evaluation",
    "governor.policy.forecast",
    "governor.policy.headroom",
    "governor.policy.panic",
    "governor.policy.recommend",
    "governor.policy.replicas",
    "governor.policy.scale",
    "governor.policy.staleness",
    "governor.policy.status",
    "governor.policy.zero",
    "governor.cores.decider",
    "governor.cores.decider_due",
    "governor.cores.decider_handover",
)

SRC = Path(__file__).resolve().parent.parent  # the folder that holds the governor package


def source(module: str, root: Path = SRC) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def extension(module: str, root: Path = SRC) -> Path:
    """Where `tools/compile_hot.py` puts the module's build: beside its source, with this
    interpreter's extension suffix (`.cpython-311-x86_64-linux-gnu.so`)."""
    name = module.rsplit(".", 1)[-1] + EXTENSION_SUFFIXES[0]
    return source(module, root).with_name(name)


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def compiled(modules: tuple[str, ...] = HOT, root: Path = SRC) -> list[str]:
    """The modules that have a build beside their source (Python imports it instead)."""
    return [m for m in modules if _mtime(extension(m, root)) is not None]


def stale(modules: tuple[str, ...] = HOT, root: Path = SRC) -> list[str]:
    """The modules whose build is older than their source."""
    out = []
    for m in modules:
        built = _mtime(extension(m, root))
        if built is not None and (_mtime(source(m, root)) or 0.0) > built:
            out.append(m)
    return out


def refuse_stale(modules: tuple[str, ...] = HOT, root: Path = SRC) -> None:
    """ImportError naming the fix when a build is older than its source (a few stat calls)."""
    old = stale(modules, root)
    if old:
        raise ImportError(
            f"{', '.join(old)}: the compiled build is older than the source, so Python would run"
            " the old code. Run `make setup` to rebuild it (or `python tools/compile_hot.py"
            " --remove` to run the sources interpreted)."
        )


def describe(modules: tuple[str, ...] = HOT, root: Path = SRC) -> str:
    """For the benchmarks' headers: how much of the hot path runs compiled."""
    n = len(compiled(modules, root))
    if n == 0:
        return "hot path interpreted (no mypyc build: tools/compile_hot.py)"
    return f"hot path compiled with mypyc ({n} of {len(modules)} modules)"
