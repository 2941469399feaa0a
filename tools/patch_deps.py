"""Apply deploy/patches/*.patch to this environment's installed packages (`make setup` runs it).

A patch is named `<distribution>-<version>-<what>.patch` and is applied only to that exact
version (another version: it fails, naming the patch, so an upgrade cannot silently drop it).
Idempotent: a patch already applied is left as it is. Each patched file is written as a new
file and renamed over the old one: uv installs packages as hardlinks into its cache, and
editing one in place would change the cache, and so every other environment using it.

Why patches at all: faust-streaming 0.15.3 hard-codes its consumer's fetch wait (1.5 s) with
no setting (governor_aggregator.main says what that costs); the patch makes it an environment
variable. Only the patch is committed, never a copy of the package.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PATCHES = Path(__file__).resolve().parents[1] / "deploy" / "patches"


def _run_patch(args: list[str], cwd: Path, patch: Path) -> bool:
    with patch.open("rb") as f:
        return (
            subprocess.run(
                ["patch", "-p1", "--silent", *args], cwd=cwd, stdin=f, capture_output=True
            ).returncode
            == 0
        )


def _files(patch: Path) -> list[str]:
    return [
        line[6:].split("\t")[0].strip()
        for line in patch.read_text().splitlines()
        if line.startswith("+++ b/")
    ]


def apply(patch: Path, site: Path) -> str:
    parts = patch.stem.split("-")
    # `<distribution>-<version>-<what>`: the version is the first part that starts with a digit.
    at = next(i for i, p in enumerate(parts) if p[:1].isdigit())
    dist, version = "-".join(parts[:at]), parts[at]
    installed = importlib.metadata.version(dist)
    if installed != version:
        raise SystemExit(f"{patch.name}: for {dist} {version}, installed is {installed}")
    if _run_patch(["--dry-run", "--reverse", "--force"], site, patch):
        return "already applied"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for rel in _files(patch):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(site / rel, work / rel)
        if not _run_patch(["--forward"], work, patch):
            raise SystemExit(f"{patch.name} does not apply to {dist} {installed}")
        for rel in _files(patch):
            target = site / rel
            fresh = target.with_name(target.name + ".governor-patch")
            shutil.copyfile(work / rel, fresh)
            os.replace(fresh, target)  # a new inode: the hardlinked original stays as it was
            for cached in target.parent.glob(f"__pycache__/{target.stem}.*.pyc"):
                cached.unlink()
    return "applied"


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    for patch in sorted(PATCHES.glob("*.patch")):
        print(f"{patch.name}: {apply(patch, site)} ({site})", file=sys.stderr)


if __name__ == "__main__":
    main()
