"""The chaos run (issue 21): two instances of every governor service on the real broker and
kube-apiserver, 20 web Deployments and an elastic PyTorchJob under a trace-driven load at 10x,
faults injected one at a time and healed, and the checks after each (tests/chaos/).

    uv run python bench/chaos.py --short          # every fault once (<= 20 min)
    uv run python bench/chaos.py --soak 1800      # a random fault every 2 minutes, RSS at both ends
    uv run python bench/chaos.py --fault sigkill-decider-0 --fault broker-kill

Uses the broker and control plane of the environment (GOVERNOR_KAFKA_PORT,
GOVERNOR_DEVCLUSTER_HOME...): both are reset and started here, and stopped at the end (--keep
leaves them up). One line per fault, failed ones too:

    fault=<name> converge_s=<x> lost=<n> duplicates=<n> regressions=<n>

then the checks without a column (`scale_down_on_missing`, `unaudited`, `older_input`), `restarts`
(instances that exited on their own in the episode and were started again, as a Deployment would)
and `ok`. converge_s is
from the heal to the start of 10 s with every workload within +-1 of the fault-free reference;
if that never happened, the time waited. Targets: converge_s <= 30, lost=duplicates=regressions=0.
Not a timed test; CI does not run it. docs/failure-modes.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from governor_tools.toxiproxy import Toxiproxy  # noqa: E402
from tests.chaos import faults  # noqa: E402
from tests.chaos.harness import (  # noqa: E402
    DEVCLUSTER_SH,
    KAFKA_SH,
    TOXIPROXY_SH,
    Broker,
    ChaosRun,
    Fault,
    network,
    rss_kib,
    script,
)

# Toxiproxy's API and the proxies: GOVERNOR_TOXIPROXY_PORT (default 8474) and the three after it,
# unless the broker's proxied listener and its proxy are given (kafka.sh's own variables).
TOXIPROXY_PORT = int(os.environ.get("GOVERNOR_TOXIPROXY_PORT", "8474"))
PROXIED_PORT = int(os.environ.get("GOVERNOR_KAFKA_PROXIED_PORT", TOXIPROXY_PORT + 1))
PROXY_PORT = int(os.environ.get("GOVERNOR_KAFKA_PROXY_PORT", TOXIPROXY_PORT + 2))
APISERVER_PROXY_PORT = TOXIPROXY_PORT + 3


def _infra() -> tuple[str, Path, str]:
    """A clean broker (with its listener behind Toxiproxy) and control plane; Toxiproxy's URL."""
    os.environ.setdefault("GOVERNOR_KAFKA_PROXIED_PORT", str(PROXIED_PORT))
    os.environ.setdefault("GOVERNOR_KAFKA_PROXY_PORT", str(PROXY_PORT))
    os.environ["GOVERNOR_TOXIPROXY_PORT"] = str(TOXIPROXY_PORT)
    for path in (KAFKA_SH, DEVCLUSTER_SH):
        script(path, "reset", timeout=180)
    bootstrap = script(KAFKA_SH, "up", timeout=900)
    kubeconfig = Path(script(DEVCLUSTER_SH, "up", timeout=3600))
    return bootstrap, kubeconfig, script(TOXIPROXY_SH, "up", timeout=900)


def _rss(label: str, run: ChaosRun) -> None:
    rss = rss_kib(run.alive())
    print(f"rss_{label} " + " ".join(f"{k}={v // 1024}MiB" for k, v in sorted(rss.items())),
          flush=True)  # fmt: skip


async def _main(args: argparse.Namespace, bootstrap: str, kubeconfig: Path, tp_url: str) -> int:
    chosen = [faults.by_name(n) for n in args.fault] if args.fault else faults.all_faults()
    args.out.mkdir(parents=True, exist_ok=True)
    async with Toxiproxy(tp_url) as tp:
        net = await network(tp, (f"127.0.0.1:{PROXY_PORT}", f"127.0.0.1:{PROXIED_PORT}"),
                            kubeconfig, f"127.0.0.1:{APISERVER_PROXY_PORT}", args.out)  # fmt: skip
        return await _episodes(args, ChaosRun(bootstrap, kubeconfig, args.out, Broker(),
                                              web=args.workloads, net=net), chosen)  # fmt: skip


async def _episodes(args: argparse.Namespace, chaos: ChaosRun, chosen: list[Fault]) -> int:
    failed = 0
    async with chaos as run:
        print(
            f"running: {len(run.workloads)} workloads, services {sorted(run.alive())}", flush=True
        )
        if args.soak:
            _rss("start", run)
            end = time.time() + args.soak
            rng = random.Random(args.seed)
            while time.time() < end:
                period_end = time.time() + args.period
                v = await run.episode(rng.choice(chosen))
                failed += not v.ok
                print(_line(v), flush=True)
                await asyncio.sleep(max(0.0, period_end - time.time()))
            _rss("end", run)
        else:
            for fault in chosen:
                v = await run.episode(fault, settle_s=args.settle)
                failed += not v.ok
                print(_line(v), flush=True)
    return 1 if failed else 0


def _line(v: object) -> str:
    from tests.chaos.checks import Verdict

    assert isinstance(v, Verdict)
    return (
        f"{v.line()} scale_down_on_missing={v.scale_down_on_missing} unaudited={v.unaudited} "
        f"older_input={v.older_input} restarts={v.restarts} ok={str(v.ok).lower()}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--short", action="store_true", help="every fault once (the default)")
    mode.add_argument("--soak", type=float, default=0.0, help="seconds of random faults")
    p.add_argument("--fault", action="append", default=[], help="only these faults (repeat)")
    p.add_argument("--period", type=float, default=120.0, help="soak: seconds between faults")
    p.add_argument("--settle", type=float, default=5.0, help="seconds between two faults")
    p.add_argument("--workloads", type=int, default=20, help="web Deployments (plus the job)")
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--out", type=Path, default=REPO / "out" / "chaos")
    p.add_argument("--keep", action="store_true", help="leave the broker and API server up")
    args = p.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the broker-kill's reconnects
    t = time.monotonic()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    bootstrap, kubeconfig, tp_url = _infra()
    try:
        code = asyncio.run(_main(args, bootstrap, kubeconfig, tp_url))
    finally:
        if not args.keep:
            for path in (TOXIPROXY_SH, DEVCLUSTER_SH, KAFKA_SH):
                script(path, "down", timeout=120)
    load = os.getloadavg()
    print(f"wall {time.monotonic() - t:.0f} s; load average at end: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
