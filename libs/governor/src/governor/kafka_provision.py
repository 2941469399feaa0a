"""What `admin` does to a secure broker at deploy time: governor's topics, then every ACL.

The services have no CREATE right on the contract's topics (only the aggregator on faust's own
internal ones), so the topics of `governor.events.TOPICS` and their dead-letter topics are made
here, from the same table as `governor topics create` (`governor.topics.specs()`), and then the
ACLs of `governor.kafka_acls`. Idempotent: an existing topic or ACL is left as it is.

    python -m governor.kafka_provision apply --config admin.librdkafka.conf
    python -m governor.kafka_provision ping --config admin.librdkafka.conf   # exit 0 = ready

`deploy/kafka/kafka.sh up --secure` runs `apply`; compose and the kustomize base run it as an
init job with admin's credentials.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from governor import kafka_acls
from governor.events import AGGREGATOR_APP_ID, AGGREGATOR_TABLE, METRICS
from governor.topics import TopicSpec, specs

# faust declares these itself (the aggregator may CREATE them); made here too, so that they exist
# with the right shape before the first aggregator starts and ACL probes find them.
FAUST_SPECS = (
    TopicSpec(
        f"{AGGREGATOR_APP_ID}-{AGGREGATOR_TABLE}-changelog",
        METRICS.partitions,
        {"cleanup.policy": "compact"},
        compacted=True,
    ),
    TopicSpec(f"{AGGREGATOR_APP_ID}-__assignor-__leader", 1, {"cleanup.policy": "compact"}),
)


def create_topics(conf: Mapping[str, str], timeout_s: float = 30.0) -> list[str]:
    """Create the table's topics that are missing; returns the names created."""
    admin = AdminClient(dict(conf))
    wanted = [*specs(), *FAUST_SPECS]
    have = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [s for s in wanted if s.name not in have]
    if not missing:
        return []
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, 1, config=dict(s.configs)) for s in missing],
        request_timeout=timeout_s,
    )
    created = []
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        created.append(name)
    return sorted(created)


def wait_ready(
    conf: Mapping[str, str], topics: list[str], timeout_s: float = 60.0, poll_s: float = 0.5
) -> None:
    """Wait until the broker serves every ACL of the table and every topic has a leader on each
    partition: a client that starts right after provisioning otherwise meets a broker that does
    not yet authorize it (describe shows no ACL for a moment after a fresh start), and librdkafka
    2.16 can crash on the metadata churn that follows."""
    admin = AdminClient(dict(conf))
    wanted = set(kafka_acls.bindings())
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(timeout=timeout_s).topics
        led = all(
            t in meta
            and meta[t].partitions
            and all(p.leader >= 0 for p in meta[t].partitions.values())
            for t in topics
        )
        if led and wanted <= set(kafka_acls.broker_bindings(conf, timeout_s)):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the broker does not serve the ACLs and topics after {timeout_s} s")
        time.sleep(poll_s)


def ping(conf: Mapping[str, str], timeout_s: float = 5.0) -> int:
    """How many brokers the cluster's metadata lists (raises when none answers in time)."""
    return len(AdminClient(dict(conf)).list_topics(timeout=timeout_s).brokers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governor.kafka_provision",
        description="Create governor's topics and ACLs on a secure broker, as admin.",
    )
    parser.add_argument("command", choices=["apply", "ping"])
    parser.add_argument("--config", type=Path, required=True, help="admin's librdkafka config")
    args = parser.parse_args(argv)
    conf = kafka_acls.read_librdkafka_conf(args.config)
    try:
        if args.command == "ping":
            print(f"kafka_provision: {ping(conf)} broker(s)")
            return 0
        created = create_topics(conf)
        acls = kafka_acls.apply(conf, kafka_acls.bindings())
        wait_ready(conf, [s.name for s in (*specs(), *FAUST_SPECS)])
    except (KafkaException, TimeoutError) as e:
        print(f"kafka_provision: {e}", file=sys.stderr)
        return 1
    print(f"kafka_provision: {len(created)} topics created, {acls} ACLs in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
