"""Who may push samples for which workloads: the pure part of the push endpoint's auth.

A caller presents a bearer token. With a cluster the collector asks the API server who it is
(TokenReview) and whether it may `create` the virtual subresource `scalingpolicies/samples` in
each namespace of the batch (SubjectAccessReview): the kube-rbac-proxy pattern, so a Role grants
pushing like any other right. Without a cluster a tokens file maps each token to the namespaces
it may push for. Either way a batch is accepted whole or not at all: the first sample outside the
caller's namespaces rejects it, by index.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import msgspec
import yaml

# The SubjectAccessReview the endpoint asks for each namespace of a batch.
SAR_GROUP = "governor.dev"
SAR_RESOURCE = "scalingpolicies"
SAR_SUBRESOURCE = "samples"
SAR_VERB = "create"


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller: the user (and groups) the token belongs to."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = msgspec.field(default_factory=dict)


class Denied(msgspec.Struct, frozen=True):
    """The first sample of a batch the caller may not push."""

    index: int
    workload: str
    namespace: str


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def namespace_of(workload: str) -> str:
    """The namespace of a workload id `namespace/kind/name` (validated before this is asked)."""
    return workload.split("/", 1)[0]


def namespaces(workloads: Sequence[str]) -> list[str]:
    """The distinct namespaces of a batch, in order of first appearance."""
    return list(dict.fromkeys(namespace_of(w) for w in workloads))


def first_denied(workloads: Sequence[str], may_push: Callable[[str], bool]) -> Denied | None:
    """The first workload whose namespace the caller may not push for, else None."""
    for i, w in enumerate(workloads):
        ns = namespace_of(w)
        if not may_push(ns):
            return Denied(i, w, ns)
    return None


def access_review(caller: Caller, namespace: str) -> dict[str, object]:
    """The SubjectAccessReview body asking whether `caller` may push for `namespace`."""
    spec: dict[str, object] = {
        "user": caller.user,
        "groups": list(caller.groups),
        "resourceAttributes": {
            "namespace": namespace,
            "verb": SAR_VERB,
            "group": SAR_GROUP,
            "resource": SAR_RESOURCE,
            "subresource": SAR_SUBRESOURCE,
        },
    }
    if caller.uid:
        spec["uid"] = caller.uid
    if caller.extra:
        spec["extra"] = caller.extra
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def caller_of_review(status: Mapping[str, object]) -> Caller | None:
    """The caller a TokenReview's status names, or None if the token did not authenticate."""
    if status.get("authenticated") is not True:
        return None
    user = status.get("user")
    if not isinstance(user, Mapping) or not isinstance(user.get("username"), str):
        return None
    try:
        return msgspec.convert(
            {
                "user": user["username"],
                "groups": user.get("groups") or [],
                "uid": user.get("uid") or "",
                "extra": user.get("extra") or {},
            },
            Caller,
        )
    except msgspec.ValidationError:
        return None


# --- the tokens file (no cluster) --------------------------------------------------------------


class TokenGrant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One caller of the tokens file: its name (in logs and metrics, never the token), its
    token, and the namespaces it may push for."""

    name: str
    token: str
    namespaces: list[str]

    def __post_init__(self) -> None:
        if not self.name or not self.token:
            raise ValueError("every token needs a non-empty name and token")
        if len(self.token) < 16:
            raise ValueError(f"token of {self.name!r}: at least 16 characters, got fewer")


class TokensFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`tokens: [{name, token, namespaces: [...]}, ...]` (YAML or JSON)."""

    tokens: list[TokenGrant]

    def __post_init__(self) -> None:
        names = [t.name for t in self.tokens]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"names must be unique, repeated: {dup}")

    def lookup(self, token: str) -> TokenGrant | None:
        """The grant of `token`, compared in constant time (every grant is compared)."""
        found = None
        for grant in self.tokens:
            if hmac.compare_digest(grant.token.encode(), token.encode()):
                found = grant
        return found


class TokensFileError(ValueError):
    """The tokens file cannot be read or is not a tokens file (the message never quotes it)."""


def load_tokens_file(path: Path) -> TokensFile:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TokensFileError(f"{path}: cannot read the tokens file ({type(e).__name__})") from None
    try:
        return msgspec.convert(data, TokensFile)
    except msgspec.ValidationError as e:
        raise TokensFileError(
            f"{path}: {e}; expected tokens: [{{name, token, namespaces: [..]}}]"
        ) from None
