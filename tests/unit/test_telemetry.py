import json
import logging

import aiohttp

from governor.telemetry import HealthServer, JsonFormatter


def test_json_log_line_carries_extra_fields() -> None:
    record = logging.makeLogRecord(
        {"msg": "scaled %s", "args": ("web",), "levelname": "INFO", "workload": "ns/Deployment/web"}
    )
    doc = json.loads(JsonFormatter("decider").format(record))
    assert doc["msg"] == "scaled web"
    assert doc["workload"] == "ns/Deployment/web"
    assert doc["service"] == "decider"


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
