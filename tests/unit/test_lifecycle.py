"""governor.lifecycle.serve: a service runs until its loop ends or a signal; it is stopped
either way, and a signal lets the work in hand finish (within the grace period)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from governor.lifecycle import serve

LOG = logging.getLogger("test.lifecycle")


class Recorder:
    """A service whose loop ends by `request_stop()` after `finish_s`, or raises `fails`."""

    def __init__(self, finish_s: float = 0.0, fails: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.finish_s, self.fails = finish_s, fails
        self._stop = asyncio.Event()

    async def start(self) -> None:
        self.calls.append("start")

    async def run(self) -> None:
        self.calls.append("run")
        if self.fails is not None:
            raise self.fails
        await self._stop.wait()
        await asyncio.sleep(self.finish_s)
        self.calls.append("run done")

    def request_stop(self) -> None:
        self.calls.append("request_stop")
        self._stop.set()

    async def stop(self) -> None:
        self.calls.append("stop")


async def _signal_soon(sig: signal.Signals) -> None:
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lets_the_work_in_hand_finish_then_stops(sig: signal.Signals) -> None:
    service = Recorder(finish_s=0.05)

    async def main() -> None:
        asyncio.get_running_loop().create_task(_signal_soon(sig))
        await serve(service, LOG)

    asyncio.run(main())
    assert service.calls == ["start", "run", "request_stop", "run done", "stop"]


def test_a_loop_that_fails_raises_its_error_after_stopping() -> None:
    service = Recorder(fails=RuntimeError("broker gone"))
    with pytest.raises(RuntimeError, match="broker gone"):
        asyncio.run(serve(service, LOG))
    assert service.calls == ["start", "run", "stop"]


def test_work_that_outlasts_the_grace_period_is_cut_short_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Recorder(finish_s=5.0)

    async def main() -> None:
        asyncio.get_running_loop().create_task(_signal_soon(signal.SIGTERM))
        await serve(service, LOG, grace_s=0.1)

    with caplog.at_level(logging.WARNING, logger="test.lifecycle"):
        asyncio.run(main())
    assert service.calls == ["start", "run", "request_stop", "stop"]
    assert "the work in hand did not finish within 0.1s" in caplog.text
