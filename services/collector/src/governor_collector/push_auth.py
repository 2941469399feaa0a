"""The push endpoint's authenticators: the Kubernetes API server, or a tokens file.

Both answer two questions for `push_routes`: who holds this bearer token (None: nobody, 401) and,
for the namespaces of a batch, which ones the caller may push for (403 names the first sample
outside them). The decisions are `governor.push_auth`'s; this module only asks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from governor.kube import Kube, KubeError
from governor.push_auth import (
    Caller,
    TokensFile,
    access_review,
    caller_of_review,
    load_tokens_file,
)

log = logging.getLogger("governor_collector.push_auth")


class AuthUnavailable(ConnectionError):
    """The API server did not answer a review: neither allowed nor denied (503, retry)."""


class PushAuth(Protocol):
    async def authenticate(self, token: str) -> Caller | None: ...

    async def may_push(self, caller: Caller, namespaces: Sequence[str]) -> dict[str, bool]: ...


class TokensFileAuth:
    """Without a cluster: each token of the file may push for its namespaces."""

    def __init__(self, tokens: TokensFile) -> None:
        self.tokens = tokens

    @classmethod
    def load(cls, path: Path) -> TokensFileAuth:
        return cls(load_tokens_file(path))

    async def authenticate(self, token: str) -> Caller | None:
        grant = self.tokens.lookup(token)
        return None if grant is None else Caller(user=grant.name)

    async def may_push(self, caller: Caller, namespaces: Sequence[str]) -> dict[str, bool]:
        grant = next((g for g in self.tokens.tokens if g.name == caller.user), None)
        granted = set(grant.namespaces) if grant else set()
        return {ns: ns in granted for ns in namespaces}


class KubeAuth:
    """With a cluster: TokenReview for who, SubjectAccessReview (create scalingpolicies/samples
    in the namespace) for what. The collector's ServiceAccount needs `system:auth-delegator`."""

    def __init__(self, kube: Kube, audiences: Sequence[str] = ()) -> None:
        self.kube = kube
        self.audiences = list(audiences)

    async def authenticate(self, token: str) -> Caller | None:
        spec: dict[str, object] = {"token": token}
        if self.audiences:
            spec["audiences"] = self.audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            review = await self.kube.create("authentication.k8s.io/v1", "tokenreviews", body)
        except (KubeError, OSError, TimeoutError) as e:
            raise AuthUnavailable(f"TokenReview failed: {type(e).__name__}: {e}") from None
        return caller_of_review(review.get("status") or {})

    async def may_push(self, caller: Caller, namespaces: Sequence[str]) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for ns in namespaces:
            try:
                review = await self.kube.create(
                    "authorization.k8s.io/v1", "subjectaccessreviews", access_review(caller, ns)
                )
            except (KubeError, OSError, TimeoutError) as e:
                raise AuthUnavailable(
                    f"SubjectAccessReview failed: {type(e).__name__}: {e}"
                ) from None
            out[ns] = bool((review.get("status") or {}).get("allowed"))
            if not out[ns]:
                break  # the batch is rejected at its first namespace denied: ask no further
        return out
