"""Compile the decision hot path (`governor.compiled.HOT`) with mypyc; `make setup` runs it.

The extension modules are built beside their sources in libs/governor/src (ignored by git),
where Python imports them instead of the sources. A stamp (the hash of every governor source,
mypy's version and the interpreter's) makes a second run a no-op when nothing changed. Every run
ends by touching the builds, so that the import guard (`governor.compiled.refuse_stale`) reads
them as newer than the sources the hash vouches for. Every governor source is in the hash, not
only the compiled ones: mypyc binds the compiled modules to the types they import.

Without a C compiler or Python's headers it says so and leaves the sources interpreted: the
same code, about 1.3× slower on the hot path (under CI=true that is an error: CI measures
the compiled build). `--remove` deletes the builds (to profile the hot path line by line with
cProfile or py-spy, which see only Python frames).

    uv run python tools/compile_hot.py [--remove]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType

SRC = Path(__file__).resolve().parents[1] / "libs" / "governor" / "src"


def _compiled_module() -> ModuleType:
    """governor/compiled.py by its path: importing the governor package would refuse to load
    over stale builds, which are what this rebuilds."""
    path = SRC / "governor" / "compiled.py"
    spec = importlib.util.spec_from_file_location("_governor_compiled", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_c = _compiled_module()
HOT: tuple[str, ...] = _c.HOT
extension, source = _c.extension, _c.source
EXTENSION_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

BUILD = SRC.parent / "build" / "mypyc"  # libs/governor/build/mypyc: C sources, objects, stamp
STAMP = BUILD / "stamp"
GROUP = "governor_hot"  # the shared library of the group: governor_hot__mypyc.<suffix>


def fingerprint() -> str:
    h = hashlib.sha256()
    h.update(importlib.metadata.version("mypy").encode())
    h.update(sys.version.encode())
    for path in sorted((SRC / "governor").rglob("*.py")):
        h.update(str(path.relative_to(SRC)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def builds() -> list[Path]:
    """Every module's build and the group's shared library, which they all load."""
    return [extension(m) for m in HOT] + [SRC / f"{GROUP}__mypyc{EXTENSION_SUFFIX}"]


def orphans() -> list[Path]:
    """Builds of modules no longer in HOT: they would shadow their sources unchecked."""
    ours = set(builds())
    return [p for p in (SRC / "governor").rglob(f"*{EXTENSION_SUFFIX}") if p not in ours]


def remove() -> int:
    gone = [p for p in builds() if p.exists()] + orphans()
    for p in gone:
        p.unlink()
    shutil.rmtree(BUILD, ignore_errors=True)
    print(f"compile_hot: removed {len(gone)} builds; the hot path runs interpreted")
    return 0


def missing_toolchain() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h)"
    return None


def build() -> None:
    # Imported here: setuptools and mypyc are build tools, not needed to --remove.
    from mypyc.build import mypycify
    from setuptools import setup

    BUILD.mkdir(parents=True, exist_ok=True)
    paths = [str(source(m).relative_to(SRC)) for m in HOT]
    cwd = Path.cwd()
    os.chdir(SRC)  # mypyc names the modules from the paths, relative to here
    try:
        modules = mypycify(paths, group_name=GROUP, target_dir=str(BUILD / "c"), opt_level="3")
        dirs = ["--build-temp", str(BUILD / "obj"), "--build-lib", str(BUILD / "lib")]
        args = ["--quiet", "build_ext", "--inplace", *dirs]
        setup(name=GROUP, ext_modules=modules, script_args=args)
    finally:
        os.chdir(cwd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remove", action="store_true", help="delete the builds (run interpreted)")
    if ap.parse_args().remove:
        return remove()
    why = missing_toolchain()
    if why is not None:
        print(f"compile_hot: {why}: the hot path runs interpreted (the same code, slower)")
        return 1 if os.environ.get("CI") == "true" else 0
    for p in orphans():
        p.unlink()
    stamp = fingerprint()
    present = all(p.exists() for p in builds())
    if present and STAMP.exists() and STAMP.read_text() == stamp:
        print(f"compile_hot: {len(HOT)} modules up to date")
    else:
        started = time.monotonic()
        build()
        STAMP.write_text(stamp)
        took = time.monotonic() - started
        print(f"compile_hot: compiled {len(HOT)} modules with mypyc in {took:.0f} s")
    # Newer than every source, checked by the hash: setuptools keeps the time of a module's
    # unchanged shim, and a checkout may rewrite a source with the same bytes.
    now = time.time()
    for p in builds():
        os.utime(p, (now, now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
