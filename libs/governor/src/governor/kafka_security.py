"""How a governor client authenticates to Kafka: the one place that turns settings into the
clients' security options (aiokafka for the bus, faust for the aggregator, librdkafka for tools).

Plaintext (the default) is for local play. A deployment uses SASL_SSL with SCRAM-SHA-512, one
user per service (`governor.events.PRINCIPALS`), and the CA that signed the broker's certificate.
The password is never a setting: it is read, when a client is built, from a file (a mounted
Secret) or from an environment variable, so no settings dump, log line or metric label holds it.

In every service's settings it sits under `kafka.security`, e.g.
`GOVERNOR_DECIDER_KAFKA__SECURITY__PROTOCOL=SASL_SSL`, `..._USERNAME=decider`,
`..._PASSWORD_FILE=/var/run/secrets/kafka/password`, `..._CA_FILE=/var/run/secrets/kafka/ca.pem`.
Tools and the CLI read `GOVERNOR_KAFKA_SECURITY_PROTOCOL`, `GOVERNOR_KAFKA_SASL_USERNAME`,
`GOVERNOR_KAFKA_SASL_PASSWORD_FILE` (or the password itself in `GOVERNOR_KAFKA_SASL_PASSWORD`)
and `GOVERNOR_KAFKA_SSL_CA_FILE` (`from_env()`).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]

ENV_PROTOCOL = "GOVERNOR_KAFKA_SECURITY_PROTOCOL"
ENV_USERNAME = "GOVERNOR_KAFKA_SASL_USERNAME"
ENV_PASSWORD_FILE = "GOVERNOR_KAFKA_SASL_PASSWORD_FILE"
ENV_PASSWORD = "GOVERNOR_KAFKA_SASL_PASSWORD"
ENV_CA_FILE = "GOVERNOR_KAFKA_SSL_CA_FILE"
ENV_MECHANISM = "GOVERNOR_KAFKA_SASL_MECHANISM"


class KafkaSecurityError(ValueError):
    """The security settings are incomplete, or the password cannot be read (never shown)."""


class KafkaSecurity(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Settings, not secrets: where the password is, not what it is."""

    protocol: Protocol = "PLAINTEXT"
    mechanism: Mechanism = "SCRAM-SHA-512"
    username: str = ""
    # The password: the first line of this file, else the value of this environment variable.
    password_file: str = ""
    password_env: str = ""
    # PEM file of the CA that signed the broker's certificate; empty: the system's CAs.
    ca_file: str = ""

    def __post_init__(self) -> None:
        if self.sasl and not self.username:
            raise KafkaSecurityError(f"security.username: {self.protocol} needs a SASL user")
        if self.sasl and not (self.password_file or self.password_env):
            raise KafkaSecurityError(
                f"security.password_file or security.password_env: {self.protocol} needs the "
                "SASL password from a file (a mounted Secret) or an environment variable"
            )

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")


PLAINTEXT = KafkaSecurity()


def from_env(env: Mapping[str, str] | None = None) -> KafkaSecurity:
    """The security of tools and the CLI, from `GOVERNOR_KAFKA_*` (plaintext when unset)."""
    env = os.environ if env is None else env
    protocol = env.get(ENV_PROTOCOL, "PLAINTEXT").upper()
    data: dict[str, str] = {"protocol": protocol}
    for key, name in (
        ("username", ENV_USERNAME),
        ("password_file", ENV_PASSWORD_FILE),
        ("ca_file", ENV_CA_FILE),
        ("mechanism", ENV_MECHANISM),
    ):
        if env.get(name):
            data[key] = env[name]
    if env.get(ENV_PASSWORD) and "password_file" not in data:
        data["password_env"] = ENV_PASSWORD
    try:
        return msgspec.convert(data, KafkaSecurity)
    except msgspec.ValidationError as e:
        raise KafkaSecurityError(f"GOVERNOR_KAFKA_* security settings: {e}") from None


def password(sec: KafkaSecurity, env: Mapping[str, str] | None = None) -> str:
    """The SASL password; KafkaSecurityError says where it was looked for, never what it is."""
    env = os.environ if env is None else env
    if sec.password_file:
        try:
            lines = Path(sec.password_file).read_text().splitlines()
        except OSError as e:
            raise KafkaSecurityError(
                f"security.password_file {sec.password_file}: cannot read it ({e.strerror})"
            ) from None
        if not lines or not lines[0]:
            raise KafkaSecurityError(f"security.password_file {sec.password_file} is empty")
        return lines[0]
    value = env.get(sec.password_env, "")
    if not value:
        raise KafkaSecurityError(f"security.password_env: ${sec.password_env} is not set")
    return value


def ssl_context(sec: KafkaSecurity) -> ssl.SSLContext:
    """TLS that verifies the broker's certificate and host name against the CA file."""
    try:
        ctx = ssl.create_default_context(cafile=sec.ca_file or None)
    except (OSError, ssl.SSLError) as e:
        raise KafkaSecurityError(f"security.ca_file {sec.ca_file}: {e}") from None
    return ctx


def aiokafka_options(
    sec: KafkaSecurity | None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Keyword arguments for AIOKafkaProducer/Consumer/AdminClient; `{}` for plaintext. None:
    `from_env()`."""
    sec = from_env(env) if sec is None else sec
    if sec.protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.tls:
        out["ssl_context"] = ssl_context(sec)
    if sec.sasl:
        out["sasl_mechanism"] = sec.mechanism
        out["sasl_plain_username"] = sec.username
        out["sasl_plain_password"] = password(sec, env)
    return out


def librdkafka_config(
    sec: KafkaSecurity | None, bootstrap: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The same settings for librdkafka clients (confluent-kafka; kcat's `-X key=value`)."""
    sec = from_env(env) if sec is None else sec
    out = {"bootstrap.servers": bootstrap, "security.protocol": sec.protocol}
    if sec.tls and sec.ca_file:
        out["ssl.ca.location"] = sec.ca_file
    if sec.sasl:
        out["sasl.mechanisms"] = sec.mechanism
        out["sasl.username"] = sec.username
        out["sasl.password"] = password(sec, env)
    return out
