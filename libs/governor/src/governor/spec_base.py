"""The base of every ScalingPolicy section and the error a bad one raises (spec.py re-exports)."""

from __future__ import annotations

import msgspec


class PolicyError(ValueError):
    """An invalid policy: names the field path and what is allowed."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class Spec(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    """Base for user-written config: unknown fields are typos, so they are rejected."""
