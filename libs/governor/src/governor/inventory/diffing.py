"""Change detection: whether a new event is worth publishing over the last one."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import msgspec

from governor.events import (
    Event,
)
from governor.inventory.names import VOLATILE_FIELDS

E = TypeVar("E", bound=Event)


@functools.cache
def _volatile_defaults(typ: type[Any]) -> dict[str, Any]:
    return {f.name: f.default for f in msgspec.structs.fields(typ) if f.name in VOLATILE_FIELDS}


def content(value: E) -> E:
    """The message without its observation timestamps: what "a change" is measured on."""
    zero = _volatile_defaults(type(value))
    return msgspec.structs.replace(value, **zero) if zero else value


def worth_publishing(last: Event | None, new: Event | None) -> bool:
    """True when `new` differs from the last published value of its key (None = tombstone)."""
    if last is None or new is None:
        return (last is None) != (new is None)
    return type(last) is not type(new) or content(last) != content(new)
