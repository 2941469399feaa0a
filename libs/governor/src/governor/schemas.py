"""The contract as JSON Schema: one document per topic of `governor.events.TOPICS`."""

from __future__ import annotations

from typing import Any

import msgspec

from governor.events import SCHEMA_VERSION, TOPICS


def json_schemas() -> dict[str, dict[str, Any]]:
    """Each topic's JSON Schema, for subscribers (`governor schema export`); a topic carrying
    a union (governor.metrics) has the union's, with a discriminator on its tag."""
    out: dict[str, dict[str, Any]] = {}
    for t in TOPICS:
        schema = msgspec.json.schema(t.wire_type or t.type)
        schema["x-governor-topic"] = {
            "name": t.name,
            "key": t.key_doc,
            "compacted": t.compacted,
            "schemaVersion": SCHEMA_VERSION,
        }
        out[t.name] = schema
    return out
