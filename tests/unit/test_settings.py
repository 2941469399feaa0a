from pathlib import Path

import msgspec
import pytest

from governor.settings import ConfigError, KafkaSettings, load_settings


class Http(msgspec.Struct, kw_only=True):
    port: int = 8080


class Demo(msgspec.Struct, kw_only=True):
    name: str = "x"
    workers: int = 1
    ratio: float = 0.5
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    http: Http = msgspec.field(default_factory=Http)


def test_defaults_file_then_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: from-file\nworkers: 3\nkafka: {bootstrap: 'h:1'}\n")
    env = {"GV_CONFIG": str(cfg), "GV_WORKERS": "7", "GV_HTTP__PORT": "9100", "OTHER": "1"}
    s = load_settings(Demo, "GV", env=env)
    assert (s.name, s.workers, s.ratio) == ("from-file", 7, 0.5)
    assert s.kafka.bootstrap == "h:1"
    assert s.http.port == 9100


def test_bad_env_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"workers"):
        load_settings(Demo, "GV", env={"GV_WORKERS": "many"})


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_settings(Demo, "GV", env={"GV_CONFIG": str(tmp_path / "missing.yaml")})
