"""Kafka ACLs generated from the topic table (`governor.events.access_table()`).

Nothing is allowed that the table does not name: the broker runs with
`allow.everyone.if.no.acl.found=false`, `admin` is its super user, and every other principal
gets exactly

* WRITE on each topic it writes (an idempotent producer needs nothing more since Kafka 2.8),
* READ on each topic it reads and on each consumer group it reads with,
* CREATE on the internal topics it declares itself (faust's), nothing else.

READ and WRITE imply DESCRIBE, so metadata for those topics comes with them.

`bindings()` is the pure part; `apply()` and `broker_bindings()` talk to a broker as `admin`
through confluent-kafka's AdminClient (librdkafka), the client with a public ACL API.

    python -m governor.kafka_acls apply --config admin.librdkafka.conf   # idempotent
    python -m governor.kafka_acls list                                   # what the table gives
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as KafkaResourceType

from governor.events import PRINCIPALS, Access, Principal, access_table

ResourceType = Literal["topic", "group"]
Operation = Literal["READ", "WRITE", "CREATE"]
SUPER_USER: Principal = "admin"


class Binding(NamedTuple):
    """One ALLOW rule: `principal` may do `operation` on the resource (host: any)."""

    principal: str
    resource_type: ResourceType
    resource: str
    prefixed: bool
    operation: Operation

    def __str__(self) -> str:
        pattern = "prefixed" if self.prefixed else "literal"
        return (
            f"User:{self.principal} {self.operation} {self.resource_type} {self.resource} "
            f"({pattern})"
        )


def bindings_for(row: Access) -> list[Binding]:
    out: list[Binding] = []
    for p in row.writers:
        out.append(Binding(p, "topic", row.name, row.prefixed, "WRITE"))
    for p in row.readers:
        out.append(Binding(p, "topic", row.name, row.prefixed, "READ"))
    for p in row.creators:
        out.append(Binding(p, "topic", row.name, row.prefixed, "CREATE"))
    for p, group in row.groups:
        out.append(Binding(p, "group", group, False, "READ"))
    return out


def bindings(table: Iterable[Access] | None = None) -> list[Binding]:
    """Every ACL the table asks for, once each, sorted; the super user needs none."""
    rows = access_table() if table is None else table
    unique = {b for row in rows for b in bindings_for(row) if b.principal != SUPER_USER}
    unknown = {b.principal for b in unique} - set(PRINCIPALS)
    if unknown:
        raise ValueError(f"the topic table names unknown principals: {sorted(unknown)}")
    return sorted(unique)


def allowed(
    found: Iterable[Binding], principal: str, resource_type: ResourceType, name: str, op: Operation
) -> bool:
    """Whether the bindings let `principal` do `op` on a resource named `name` (what the
    broker's StandardAuthorizer decides from ALLOW rules alone)."""
    if principal == SUPER_USER:
        return True
    for b in found:
        if b.principal != principal or b.resource_type != resource_type or b.operation != op:
            continue
        if name == b.resource or (b.prefixed and name.startswith(b.resource)):
            return True
    return False


# --- the broker (confluent-kafka AdminClient) -------------------------------------------------


def read_librdkafka_conf(path: Path) -> dict[str, str]:
    """A librdkafka properties file (`key=value` lines, `#` comments) as a config dict."""
    conf: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: not a key=value line: {line.split('=')[0]!r}")
        conf[key.strip()] = value.strip()
    return conf


def _acl(b: Binding) -> AclBinding:
    return AclBinding(
        KafkaResourceType.TOPIC if b.resource_type == "topic" else KafkaResourceType.GROUP,
        b.resource,
        ResourcePatternType.PREFIXED if b.prefixed else ResourcePatternType.LITERAL,
        f"User:{b.principal}",
        "*",
        AclOperation[b.operation],
        AclPermissionType.ALLOW,
    )


def apply(conf: Mapping[str, str], wanted: Sequence[Binding], timeout_s: float = 30.0) -> int:
    """Create the wanted ACLs (creating an existing one is a no-op); returns how many."""
    admin = AdminClient(dict(conf))  # held: a collected client cancels its futures
    futures = admin.create_acls([_acl(b) for b in wanted])
    for fut in futures.values():
        fut.result(timeout=timeout_s)
    return len(wanted)


_OPERATIONS: dict[object, Operation] = {
    AclOperation.READ: "READ",
    AclOperation.WRITE: "WRITE",
    AclOperation.CREATE: "CREATE",
}
_RESOURCES: dict[object, ResourceType] = {
    KafkaResourceType.TOPIC: "topic",
    KafkaResourceType.GROUP: "group",
}


def _binding(acl: AclBinding) -> Binding:
    op = _OPERATIONS.get(acl.operation)
    rtype = _RESOURCES.get(acl.restype)
    if op is None or rtype is None or acl.permission_type != AclPermissionType.ALLOW:
        raise ValueError(f"an ACL governor does not make: {acl}")
    if acl.host != "*":
        raise ValueError(f"an ACL governor does not make: {acl}")
    prefixed = acl.resource_pattern_type == ResourcePatternType.PREFIXED
    return Binding(acl.principal.removeprefix("User:"), rtype, acl.name, prefixed, op)


def broker_bindings(conf: Mapping[str, str], timeout_s: float = 30.0) -> list[Binding]:
    """Every ACL on the broker, as Bindings (what a test compares with the table); ValueError
    for one governor would not make (a DENY, a host, another operation)."""
    # None matches any name, principal and host (the stubs only say str)
    anything: Any = None
    everything = AclBindingFilter(
        KafkaResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin = AdminClient(dict(conf))  # held: a collected client cancels its futures
    found = admin.describe_acls(everything).result(timeout=timeout_s)
    return sorted(_binding(acl) for acl in found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governor.kafka_acls",
        description="Kafka ACLs generated from governor's topic table.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="print the ACLs the table asks for")
    for name, what in (("apply", "create them on a broker"), ("check", "compare with a broker")):
        p = sub.add_parser(name, help=what)
        p.add_argument("--config", type=Path, required=True, help="admin's librdkafka config")
    args = parser.parse_args(argv)
    wanted = bindings()
    if args.cmd == "list":
        for b in wanted:
            print(b)
        return 0
    conf = read_librdkafka_conf(args.config)
    if args.cmd == "apply":
        print(f"kafka_acls: {apply(conf, wanted)} ACLs in place")
        return 0
    have = broker_bindings(conf)
    missing = sorted(set(wanted) - set(have))
    extra = sorted(set(have) - set(wanted))
    for b in missing:
        print(f"missing: {b}")
    for b in extra:
        print(f"extra:   {b}")
    print(f"kafka_acls: {len(have)} on the broker, {len(missing)} missing, {len(extra)} extra")
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
