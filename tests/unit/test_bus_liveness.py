"""governor.bus.Liveness: fresh while a broker answers, stale once probes fail for `stale_s`."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaConnectionError

from governor.bus import Liveness
from tests.support.waiting import wait_for


async def test_liveness_goes_stale_while_probes_fail_and_fresh_when_one_answers() -> None:
    live = Liveness(every_s=0.02, stale_s=0.1)
    broker_up = False
    probes = 0

    async def probe() -> None:
        nonlocal probes
        probes += 1
        if not broker_up:
            raise KafkaConnectionError("no broker")

    task = asyncio.create_task(live.run(probe))
    try:
        assert live.fresh  # just started
        await wait_for(lambda: not live.fresh)
        assert probes >= 1
        broker_up = True
        await wait_for(lambda: live.fresh)
        live.ok()
        assert live.fresh
    finally:
        task.cancel()
