"""The pure part of push authentication: tokens, reviews, and the whole-batch rule."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.push_auth import (
    Caller,
    TokensFile,
    TokensFileError,
    access_review,
    bearer_token,
    caller_of_review,
    first_denied,
    load_tokens_file,
    namespaces,
)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        (None, None),
        ("", None),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer a b", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


namespace = st.sampled_from(["a", "b", "c", "d"])
batches = st.lists(
    st.tuples(namespace, st.text(min_size=1, max_size=3)).map(
        lambda t: f"{t[0]}/Deployment/{t[1]}"
    ),
    max_size=12,
)


@given(batches, st.sets(namespace))
def test_first_denied_is_the_first_sample_outside(workloads: list[str], granted: set[str]) -> None:
    denied = first_denied(workloads, lambda ns: ns in granted)
    outside = [i for i, w in enumerate(workloads) if w.split("/")[0] not in granted]
    if not outside:
        assert denied is None
    else:
        assert denied is not None and denied.index == outside[0]
        assert denied.workload == workloads[outside[0]]
        assert denied.namespace not in granted


@given(batches)
def test_namespaces_in_order_of_first_appearance(workloads: list[str]) -> None:
    got = namespaces(workloads)
    assert len(got) == len(set(got)) == len({w.split("/")[0] for w in workloads})
    firsts = [next(i for i, w in enumerate(workloads) if w.startswith(ns + "/")) for ns in got]
    assert firsts == sorted(firsts)


def test_reviews() -> None:
    caller = caller_of_review(
        {
            "authenticated": True,
            "user": {"username": "system:serviceaccount:shop:web", "groups": ["g"], "uid": "u1"},
        }
    )
    assert caller == Caller(user="system:serviceaccount:shop:web", groups=("g",), uid="u1")
    assert caller_of_review({"authenticated": False}) is None
    assert caller_of_review({"authenticated": True, "user": {}}) is None
    sar = access_review(caller, "shop")
    assert sar["spec"]["resourceAttributes"] == {  # type: ignore[index]
        "namespace": "shop",
        "verb": "create",
        "group": "governor.dev",
        "resource": "scalingpolicies",
        "subresource": "samples",
    }
    assert sar["spec"]["user"] == caller.user  # type: ignore[index]


def test_tokens_file(tmp_path: Path) -> None:
    f = tmp_path / "tokens.yaml"
    f.write_text("tokens:\n  - {name: a, token: aaaaaaaaaaaaaaaa, namespaces: [x]}\n")
    tokens = load_tokens_file(f)
    assert tokens.lookup("aaaaaaaaaaaaaaaa") is not None
    assert tokens.lookup("aaaaaaaaaaaaaaab") is None
    f.write_text("tokens:\n  - {name: a, token: short, namespaces: [x]}\n")
    with pytest.raises(TokensFileError, match="at least 16") as e:
        load_tokens_file(f)
    assert "short" not in str(e.value)  # never quote a token
    f.write_text("tokens: [{name: a, token: aaaaaaaaaaaaaaaa, namespace: [x]}]\n")
    with pytest.raises(TokensFileError, match="expected tokens"):
        load_tokens_file(f)
    with pytest.raises(TokensFileError, match="cannot read"):
        load_tokens_file(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="unique"):
        msgspec.convert(
            {
                "tokens": [
                    {"name": "a", "token": "a" * 16, "namespaces": []},
                    {"name": "a", "token": "b" * 16, "namespaces": []},
                ]
            },
            TokensFile,
        )
