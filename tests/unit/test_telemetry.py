import json
import logging

import aiohttp
from mode.timers import Timer

from governor.telemetry import HealthServer, JsonFormatter, SlowTickAsInfo


def test_json_log_line_carries_extra_fields() -> None:
    record = logging.makeLogRecord(
        {"msg": "scaled %s", "args": ("web",), "levelname": "INFO", "workload": "ns/Deployment/web"}
    )
    doc = json.loads(JsonFormatter("decider").format(record))
    assert doc["msg"] == "scaled web"
    assert doc["workload"] == "ns/Deployment/web"
    assert doc["service"] == "decider"


def test_a_faust_timer_that_outlasts_its_interval_logs_at_info_other_warnings_stay() -> None:
    # mode's own Timer (faust's app.timer) on a clock we move: a 0.25 s tick whose body ran
    # 0.4 s logs "is overlapping" at WARNING; the aggregator's filter makes that one INFO.
    now = [0.0]
    timer = Timer(0.25, name="publish", clock=lambda: now[0])
    seen: list[logging.LogRecord] = []
    keep = logging.Handler()
    keep.emit = seen.append  # type: ignore[method-assign]
    log, slow = logging.getLogger("mode.timers"), SlowTickAsInfo()
    log.addHandler(keep)
    log.addFilter(slow)
    try:
        timer.tick()
        now[0] = 0.25
        timer.on_before_yield()  # slept its interval; the body starts
        now[0] = 0.65
        timer.tick()  # the body took 0.4 s
        log.warning("Timer %s crashed", "other")
    finally:
        log.removeHandler(keep)
        log.removeFilter(slow)
    levels = [(r.levelname, r.getMessage()) for r in seen if r.levelno >= logging.INFO]
    assert levels == [
        ("INFO", "Timer publish is overlapping (interval=0.25 runtime=0.4)"),
        ("WARNING", "Timer other crashed"),
    ]


async def test_health_server_reports_readiness() -> None:
    ready = {"ok": False}
    server = HealthServer("127.0.0.1", 0, lambda: ready["ok"])
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            assert (await http.get(f"{base}/healthz")).status == 200
            assert (await http.get(f"{base}/readyz")).status == 503
            ready["ok"] = True
            assert (await http.get(f"{base}/readyz")).status == 200
            metrics = await (await http.get(f"{base}/metrics")).text()
            assert "python_info" in metrics or "process_" in metrics
    finally:
        await server.stop()
