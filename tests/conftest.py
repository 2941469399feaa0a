"""Fixtures for real components live in tests/fixtures/, one module per component."""

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.kafka_secure",
    "tests.fixtures.kube",
    "tests.fixtures.prometheus",
    "tests.fixtures.rabbitmq",
    "tests.fixtures.redis",
    "tests.fixtures.toxiproxy",
]
