"""The chaos run's CI-sized subset (issue 21; bench/chaos.py runs every fault): two instances of
every service on a private broker (it is killed) and the dev control plane, the trace-driven
load on 20 web Deployments and an elastic PyTorchJob, and one fault after another:

- SIGKILL of a decider, then of an actuator (each started again);
- SIGKILL of the broker, then its restart;

after each, every check of tests/chaos/checks.py: no closed window lost (each is in a decider's
journal), no seq applied twice, no seq regression, no scale-down on missing data during the fault,
an Actuation for every applied seq, and convergence to the fault-free reference (every workload
within +-1 for 10 s in a row) within 30 s of the heal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import faults
from tests.chaos.harness import Broker, ChaosRun
from tests.fixtures.kafka import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_FAULTS = ("sigkill-decider-0", "sigkill-actuator-1", "broker-kill")
CONVERGE_S = 30.0


async def test_governor_holds_through_kills_and_a_broker_restart(
    kafka_restartable: KafkaBroker, kubeconfig_path: Path, tmp_path: Path
) -> None:
    broker = Broker(kafka_restartable.env)
    async with ChaosRun(kafka_restartable.bootstrap, kubeconfig_path, tmp_path, broker) as run:
        verdicts = [await run.episode(faults.by_name(name), settle_s=3.0) for name in CI_FAULTS]
        logs = {name: s.tail(1500) for name, pair in run.services.items() for s in pair[:1]}
    lines = "\n".join(f"{v.line()} {v}" for v in verdicts)
    for v in verdicts:
        assert (v.lost, v.duplicates, v.regressions) == (0, 0, 0), lines
        assert v.scale_down_on_missing == 0, lines
        assert v.unaudited == 0, lines
        assert v.converged and v.converge_s <= CONVERGE_S, f"{lines}\n{logs}"
