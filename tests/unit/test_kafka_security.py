"""Kafka security settings: the clients' options, and a password that never shows."""

from __future__ import annotations

import ssl
from pathlib import Path

import msgspec
import pytest

from governor.kafka_security import (
    KafkaSecurity,
    KafkaSecurityError,
    aiokafka_options,
    from_env,
    librdkafka_config,
    password,
)
from governor.settings import ConfigError, KafkaSettings, load_settings

SECRET = "s3cr3t-Pa55word"


def _sasl(tmp_path: Path) -> KafkaSecurity:
    f = tmp_path / "password"
    f.write_text(SECRET + "\n")
    return KafkaSecurity(protocol="SASL_SSL", username="decider", password_file=str(f))


def test_plaintext_adds_nothing() -> None:
    assert aiokafka_options(KafkaSecurity()) == {}
    assert aiokafka_options(None, env={}) == {}


def test_sasl_ssl_options(tmp_path: Path) -> None:
    opts = aiokafka_options(_sasl(tmp_path))
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert opts["sasl_plain_username"] == "decider"
    assert opts["sasl_plain_password"] == SECRET
    assert isinstance(opts["ssl_context"], ssl.SSLContext)
    assert opts["ssl_context"].check_hostname
    rd = librdkafka_config(_sasl(tmp_path), "h:1")
    assert rd["sasl.username"] == "decider" and rd["sasl.password"] == SECRET


def test_password_from_env() -> None:
    sec = KafkaSecurity(protocol="SASL_SSL", username="u", password_env="PW")
    assert password(sec, {"PW": SECRET}) == SECRET
    with pytest.raises(KafkaSecurityError, match=r"\$PW is not set"):
        password(sec, {})


def test_settings_never_hold_the_password(tmp_path: Path) -> None:
    sec = _sasl(tmp_path)
    for text in (repr(sec), str(msgspec.json.encode(sec)), repr(KafkaSettings(security=sec))):
        assert SECRET not in text


def test_errors_say_where_not_what(tmp_path: Path) -> None:
    missing = KafkaSecurity(protocol="SASL_SSL", username="u", password_file=str(tmp_path / "x"))
    with pytest.raises(KafkaSecurityError, match="cannot read it") as e:
        password(missing)
    assert SECRET not in str(e.value)
    with pytest.raises(KafkaSecurityError, match="needs a SASL user"):
        KafkaSecurity(protocol="SASL_SSL", password_env="X")
    with pytest.raises(KafkaSecurityError, match=r"password_file or security\.password_env"):
        KafkaSecurity(protocol="SASL_SSL", username="u")
    with pytest.raises(KafkaSecurityError, match="ca_file"):
        aiokafka_options(KafkaSecurity(protocol="SSL", ca_file=str(tmp_path / "no-ca.pem")), env={})


def test_service_settings_from_the_environment(tmp_path: Path) -> None:
    env = {
        "GOVERNOR_X_KAFKA__SECURITY__PROTOCOL": "SASL_SSL",
        "GOVERNOR_X_KAFKA__SECURITY__USERNAME": "actuator",
        "GOVERNOR_X_KAFKA__SECURITY__PASSWORD_FILE": "/run/secrets/pw",
        "GOVERNOR_X_KAFKA__SECURITY__CA_FILE": "/run/secrets/ca.pem",
    }

    class S(msgspec.Struct, kw_only=True):
        kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)

    s = load_settings(S, "GOVERNOR_X", env=env)
    assert s.kafka.security == KafkaSecurity(
        protocol="SASL_SSL",
        username="actuator",
        password_file="/run/secrets/pw",
        ca_file="/run/secrets/ca.pem",
    )
    with pytest.raises(ConfigError, match="needs a SASL user"):
        load_settings(S, "GOVERNOR_X", env={"GOVERNOR_X_KAFKA__SECURITY__PROTOCOL": "SASL_SSL"})


def test_tools_read_governor_kafka_env() -> None:
    sec = from_env(
        {
            "GOVERNOR_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "GOVERNOR_KAFKA_SASL_USERNAME": "viewer",
            "GOVERNOR_KAFKA_SASL_PASSWORD": SECRET,
        }
    )
    assert sec.protocol == "SASL_SSL" and sec.password_env == "GOVERNOR_KAFKA_SASL_PASSWORD"
    assert SECRET not in repr(sec)
    with pytest.raises(KafkaSecurityError, match="GOVERNOR_KAFKA_"):
        from_env({"GOVERNOR_KAFKA_SECURITY_PROTOCOL": "bogus"})
