"""The ACL matrix on the real secure broker: every (principal x topic x write/read) pair and every
(principal x consumer group) is allowed exactly where the topic table says, and denied with an
authorization error everywhere else — the Kafka counterpart of the SubjectAccessReview test.

The probes use librdkafka (confluent-kafka), a client governor did not write: a produce per
(principal, topic), a fetch from the beginning of partition 0 per (principal, topic), and an
offset fetch per (principal, group). Allowed writes leave one probe record in the topic; the
topics' readers dead-letter it like any undecodable message.
"""

from __future__ import annotations

import multiprocessing
import signal
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from governor.events import PRINCIPALS, access_table
from governor.kafka_acls import allowed, bindings, broker_bindings
from tests.fixtures.kafka_secure import SecureBroker

pytestmark = pytest.mark.integration

TOPICS = [row.name for row in access_table()]
GROUPS = sorted({g for row in access_table() for _, g in row.groups})
DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
PROBE_TIMEOUT_S = 30.0


def _writes(conf: dict[str, str]) -> dict[str, bool]:
    """Produce one record to every topic: topic -> acknowledged (False: authorization error)."""
    outcome: dict[str, bool] = {}
    errors: dict[str, KafkaError] = {}

    def report(err: KafkaError | None, msg: object) -> None:
        topic = msg.topic()  # type: ignore[attr-defined]
        if err is None:
            outcome[topic] = True
        elif err.code() in DENIED:
            outcome[topic] = False
        else:
            errors[topic] = err

    p = Producer({**conf, "message.timeout.ms": "20000", "enable.idempotence": "false"})
    for topic in TOPICS:
        p.produce(topic, b"acl-probe: not a governor event", key=b"acl-probe", on_delivery=report)
    p.flush(PROBE_TIMEOUT_S)
    assert not errors, f"produce failed other than by authorization: {errors}"
    assert set(outcome) == set(TOPICS), f"no delivery report for {set(TOPICS) - set(outcome)}"
    return outcome


def _probe(conf: dict[str, str]) -> tuple[dict[str, bool], dict[str, bool], dict[str, bool]]:
    """One principal's writes, reads and group reads."""
    return _writes(conf), _reads(conf), {g: _group_read(conf, g) for g in GROUPS}


def _probe_in_child(conf: dict[str, str], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(_probe(conf))


def _probe_isolated(
    conf: dict[str, str], tries: int = 3
) -> tuple[dict[str, bool], dict[str, bool], dict[str, bool]]:
    """`_probe` in a child process. librdkafka 2.16 (the probe client, not governor's) can die
    with SIGSEGV when a young broker's metadata answer for a topic the principal may describe but
    not write drops its partition count to 0 ("partition count changed from 1 to 0"); that
    crash says nothing of the ACLs, so the probe is run again in a new process. Any other
    failure of the child fails the test."""
    ctx = multiprocessing.get_context("spawn")
    for attempt in range(tries):
        out = ctx.Queue()
        child = ctx.Process(target=_probe_in_child, args=(conf, out))
        child.start()
        child.join(PROBE_TIMEOUT_S * 6)
        if child.exitcode == 0:
            result: tuple[dict[str, bool], dict[str, bool], dict[str, bool]] = out.get(timeout=5)
            return result
        if child.exitcode != -signal.SIGSEGV or attempt == tries - 1:
            pytest.fail(f"the probe exited with {child.exitcode}")
        time.sleep(2)
    raise AssertionError("unreachable")


def _reads(conf: dict[str, str]) -> dict[str, bool]:
    """Fetch partition 0 of every topic from the beginning: topic -> fetched a record or reached
    its end (False: an authorization error, from the metadata or the fetch)."""
    c = Consumer(
        {
            **conf,
            "group.id": "unused-assign-only",
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
        }
    )
    try:
        outcome: dict[str, bool] = {}
        # A topic the principal may not even describe: the metadata answer is the error (the
        # consumer would wait on it silently).
        for topic in TOPICS:
            err = c.list_topics(topic, timeout=PROBE_TIMEOUT_S).topics[topic].error
            if err is not None and err.code() in DENIED:
                outcome[topic] = False
            elif err is not None:
                pytest.fail(f"metadata of {topic}: {err}")
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in TOPICS if t not in outcome])
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while len(outcome) < len(TOPICS) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            topic = msg.topic()
            if topic is None or topic in outcome:
                continue
            if err is None or err.code() == KafkaError._PARTITION_EOF:
                outcome[topic] = True
            elif err.code() in DENIED:
                outcome[topic] = False
            else:
                pytest.fail(f"fetching {topic}: {err}")
        assert set(outcome) == set(TOPICS), f"no fetch outcome for {set(TOPICS) - set(outcome)}"
        return outcome
    finally:
        c.close()


COORDINATOR_NOT_READY = (
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
)


def _group_read(conf: dict[str, str], group: str) -> bool:
    """Fetch the group's committed offsets (OffsetFetch: needs READ, or DESCRIBE, on the group;
    the table grants READ alone, which implies DESCRIBE). A retriable answer (the coordinator of
    a freshly started broker still loading its offsets: COORDINATOR_LOAD_IN_PROGRESS) is asked
    again until PROBE_TIMEOUT_S."""
    admin = AdminClient(conf)
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while True:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=PROBE_TIMEOUT_S
        )
        try:
            futures[group].result(timeout=PROBE_TIMEOUT_S)
            return True
        except KafkaException as e:
            err = e.args[0]
            if err.code() in DENIED:
                return False
            loading = err.retriable() or err.code() in COORDINATOR_NOT_READY
            if not loading or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_the_broker_holds_exactly_the_tables_acls(kafka_secure: SecureBroker) -> None:
    assert broker_bindings(kafka_secure.librdkafka("admin")) == bindings()


def test_acl_matrix(kafka_secure: SecureBroker) -> None:
    table = bindings()
    checked = 0
    wrong: list[str] = []
    for principal in PRINCIPALS:
        writes, reads, groups = _probe_isolated(kafka_secure.librdkafka(principal))
        for op, outcome in (("WRITE", writes), ("READ", reads)):
            for topic, got in outcome.items():
                want = allowed(table, principal, "topic", topic, op)  # type: ignore[arg-type]
                checked += 1
                if got != want:
                    wrong.append(f"{principal} {op} {topic}: broker {got}, table {want}")
        for group in GROUPS:
            want = allowed(table, principal, "group", group, "READ")
            checked += 1
            if groups[group] != want:
                wrong.append(f"{principal} READ group {group}: table {want}")
    print(
        f"ACL matrix: {checked} pairs checked ({len(PRINCIPALS)} principals x {len(TOPICS)} "
        f"topics x write/read + {len(GROUPS)} groups), {len(wrong)} not as designed"
    )
    assert not wrong, "\n".join(wrong)
    # the matrix is not trivially all-allowed or all-denied
    assert 0 < len(table) < len(PRINCIPALS) * (2 * len(TOPICS) + len(GROUPS))


def test_a_wrong_password_is_refused(kafka_secure: SecureBroker) -> None:
    conf = {**kafka_secure.librdkafka("decider"), "sasl.password": "not-the-password"}
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": "5000"})
    p.produce("governor.decisions", b"x", key=b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
