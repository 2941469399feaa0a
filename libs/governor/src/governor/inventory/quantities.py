"""Kubernetes quantities ("500m", "2Gi", 100) as floats: cpu in cores, memory in bytes,
the rest as counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from governor.inventory.names import ROUND_DIGITS, InventoryError

Quantity = str | float

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(q: Quantity) -> float:
    """A Kubernetes resource quantity as a float: "500m" → 0.5, "2Gi" → 2147483648, 1e3 → 1000.

    Accepts the three suffix families of k8s.io/apimachinery's resource.Quantity: binary SI
    (Ki…Ei), decimal SI (n, u, m, "", k, M…E) and decimal exponents (1e3, 1E-3).
    """
    if isinstance(q, bool):
        raise InventoryError(f"not a quantity: {q!r}")
    if isinstance(q, int | float):
        if not math.isfinite(q):
            raise InventoryError(f"not a finite quantity: {q!r}")
        return float(q)
    text = q.strip()
    if not text:
        raise InventoryError("empty quantity")
    number, multiplier = text, Decimal(1)
    if text[-2:] in _BINARY:
        number, multiplier = text[:-2], Decimal(_BINARY[text[-2:]])
    elif text[-1] in _DECIMAL and not text[-1].isdigit() and text[-1] != ".":
        # "E" alone is exa; "1E3" (digits after E) is handled by Decimal as an exponent below.
        number, multiplier = text[:-1], _DECIMAL[text[-1]]
    if not number or number in "+-" or number.lstrip("+-")[:1] not in set("0123456789."):
        raise InventoryError(f"not a quantity: {q!r}")
    if any(c.isspace() for c in number) or "_" in number:
        raise InventoryError(f"not a quantity: {q!r}")
    try:
        value = Decimal(number) * multiplier
    except InvalidOperation:
        raise InventoryError(f"not a quantity: {q!r}") from None
    if not value.is_finite():
        raise InventoryError(f"not a quantity: {q!r}")
    return float(value)


def parse_resources(resources: Mapping[str, Quantity]) -> dict[str, float]:
    """A ResourceList ({"cpu": "500m", "memory": "1Gi"}) as floats."""
    out: dict[str, float] = {}
    for name, q in resources.items():
        try:
            out[name] = parse_quantity(q)
        except InventoryError as e:
            raise InventoryError(f"{name}: {e}") from None
    return out


def _add(into: dict[str, float], more: Mapping[str, float], times: float = 1.0) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v * times


def _rounded(d: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, ROUND_DIGITS) for k, v in sorted(d.items())}
