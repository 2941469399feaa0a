"""What a test does when a real component it needs is not there."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Fail under `CI=true` (CI installs and starts every component: a missing one is a broken
    CI, not a reason to pass), skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
