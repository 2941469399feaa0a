"""The chaos run's CI-sized subset (issue 21; bench/chaos.py runs every fault): two instances of
every service on a private broker (it is killed; the deciders reach it through Toxiproxy) and
the dev control plane, the trace-driven load on 20 web Deployments and an elastic PyTorchJob,
and one fault after another:

- SIGKILL of a decider, then of an actuator (each started again);
- SIGKILL of the broker, then its restart;
- a 20 s network partition between the deciders and the broker (Toxiproxy), then healed;

after each, every check of tests/chaos/checks.py: no closed window lost (each is in a decider's
journal), no seq applied twice, no seq regression, no scale-down on missing data during the fault,
an Actuation for every applied seq, and convergence to the fault-free reference (every workload
within +-1 for 10 s in a row) within 30 s of the heal.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from governor_tools.toxiproxy import Toxiproxy
from tests.chaos import faults
from tests.chaos.checks import CONVERGE_TARGET_S
from tests.chaos.harness import REPO, Broker, ChaosRun, network
from tests.fixtures.toxiproxy import ProxiedKafka
from tests.support.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_FAULTS = (
    "sigkill-decider-0",
    "sigkill-actuator-1",
    "broker-kill",
    "decider-broker-partition-20s",
)


async def test_governor_holds_through_kills_a_broker_restart_and_a_partition(
    proxied_kafka: ProxiedKafka, toxiproxy: Toxiproxy, kubeconfig_path: Path
) -> None:
    # The run's logs, journals and per-fault records (episode-<fault>.json) where they outlive
    # pytest's rotation of its temporary directories.
    tmp_path = REPO / "out" / "chaos-test"
    shutil.rmtree(tmp_path, ignore_errors=True)
    tmp_path.mkdir(parents=True)
    net = await network(
        toxiproxy, (proxied_kafka.proxied, proxied_kafka.upstream), kubeconfig_path,
        f"127.0.0.1:{free_port()}", tmp_path,
    )  # fmt: skip
    broker = Broker(proxied_kafka.broker.env)
    chaos = ChaosRun(proxied_kafka.direct, kubeconfig_path, tmp_path, broker, net=net)
    async with chaos as run:
        # The first fault waits for the deciders' first offset commit (every 5 s): a decider
        # killed before it restarts at the newest windows (a new group's `latest` reset).
        verdicts = [
            await run.episode(faults.by_name(name), settle_s=10.0 if i == 0 else 2.0)
            for i, name in enumerate(CI_FAULTS)
        ]
        logs = {name: pair[0].tail(1500) for name, pair in run.services.items()}
    lines = "\n".join(f"{v.line()} {v}" for v in verdicts)
    print(lines)
    for v in verdicts:
        assert (v.lost, v.duplicates, v.regressions) == (0, 0, 0), lines
        # No scale-down on windows that stopped arriving (a cut-off decider's last ones too:
        # `decider_memory.held_when_late`).
        assert v.scale_down_on_missing == 0, lines
        assert v.unaudited == 0, lines
        assert v.converged and v.converge_s <= CONVERGE_TARGET_S, f"{lines}\n{logs}"
