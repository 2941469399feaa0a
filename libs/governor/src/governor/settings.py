"""Typed configuration for every service: a msgspec Struct filled from a file, then the environment.

Order (later wins): the Struct's defaults, the YAML/JSON file named by `<PREFIX>_CONFIG`, then
environment variables `<PREFIX>_<FIELD>` (upper-case; nested fields joined with `__`, e.g.
`GOVERNOR_DECIDER_KAFKA__BOOTSTRAP=127.0.0.1:9092`). Values from the environment are strings;
msgspec converts them (`strict=False`), so a bad value fails with the field's path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from governor.kafka_security import KafkaSecurity

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing or of the wrong type; the message names where."""


class KafkaSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What every service needs to reach Kafka."""

    bootstrap: str = "127.0.0.1:9092"
    client_id: str = "governor"
    # SASL_SSL with a user per service in deployment (governor.kafka_security); plaintext locally
    security: KafkaSecurity = msgspec.field(default_factory=KafkaSecurity)


def _set_path(tree: dict[str, Any], path: list[str], value: str) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def _field_names(cls: type[Any]) -> dict[str, str]:
    """Upper-case env spelling -> field name, for one Struct level."""
    info = msgspec.inspect.type_info(cls)
    if not isinstance(info, msgspec.inspect.StructType):
        return {}
    return {f.encode_name.upper(): f.encode_name for f in info.fields}


def _env_overrides(cls: type[Any], prefix: str, env: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    start = f"{prefix}_"
    for key, value in env.items():
        if not key.startswith(start) or key == f"{prefix}_CONFIG":
            continue
        parts = key[len(start) :].split("__")
        names: list[str] = []
        level: Any = cls
        for part in parts:
            fields = _field_names(level) if level is not None else {}
            name = fields.get(part, part.lower())
            names.append(name)
            level = _nested_type(level, name)
        _set_path(tree, names, value)
    return tree


def _nested_type(cls: Any, name: str) -> Any:
    if cls is None:
        return None
    info = msgspec.inspect.type_info(cls)
    if not isinstance(info, msgspec.inspect.StructType):
        return None
    for f in info.fields:
        if f.encode_name == name and isinstance(f.type, msgspec.inspect.StructType):
            return f.type.cls
    return None


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_settings(
    cls: type[T], prefix: str, *, env: Mapping[str, str] | None = None, file: Path | None = None
) -> T:
    """Build `cls` from defaults, the config file and the environment; ConfigError on bad input."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    path = file or (Path(env[f"{prefix}_CONFIG"]) if f"{prefix}_CONFIG" in env else None)
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: cannot read config: {err}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping of field: value")
        data = loaded
    data = _merge(data, _env_overrides(cls, prefix, env))
    try:
        return msgspec.convert(data, cls, strict=False)
    except msgspec.ValidationError as err:
        source = f"{path} and {prefix}_* environment" if path else f"{prefix}_* environment"
        raise ConfigError(f"invalid configuration ({source}): {err}") from None
