"""Label selectors: matching, and the string form (`app=web,tier in (a,b)`) both ways."""

from __future__ import annotations

from collections.abc import Mapping

from governor.inventory.names import InventoryError
from governor.inventory.objects import LabelSelector, LabelSelectorRequirement


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics. An empty selector matches everything."""
    for k, v in selector.match_labels.items():
        if labels.get(k) != v:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        op = req.operator
        if op == "In":
            if not present or labels[req.key] not in req.values:
                return False
        elif op == "NotIn":
            if present and labels[req.key] in req.values:
                return False
        elif op == "Exists":
            if not present:
                return False
        elif op == "DoesNotExist":
            if present:
                return False
        else:
            raise InventoryError(f"label selector: unknown operator {op!r}")
    return True


def selector_string(selector: LabelSelector) -> str:
    """The selector in kubectl's string form: `app=web,tier in (a,b),!canary`."""
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        values = ",".join(sorted(req.values))
        parts.append(
            {
                "In": f"{req.key} in ({values})",
                "NotIn": f"{req.key} notin ({values})",
                "Exists": req.key,
                "DoesNotExist": f"!{req.key}",
            }.get(req.operator, f"{req.key} {req.operator} ({values})")
        )
    return ",".join(parts)


def parse_selector_string(text: str) -> LabelSelector:
    """The equality-based string form used in scale subresources' status (`a=b,c=d`); set-based
    terms (`in`, `notin`, `!k`, bare `k`) are understood too."""
    labels: dict[str, str] = {}
    exprs: list[LabelSelectorRequirement] = []
    # split on commas outside parentheses
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    for raw in terms:
        term = raw.strip()
        if not term:
            continue
        for word, op in ((" notin ", "NotIn"), (" in ", "In")):
            if word in term:
                key, _, rest = term.partition(word)
                vals = rest.strip().removeprefix("(").removesuffix(")")
                values = [v.strip() for v in vals.split(",") if v.strip()]
                exprs.append(LabelSelectorRequirement(key.strip(), op, values))
                break
        else:
            if "!=" in term:
                key, _, val = term.partition("!=")
                exprs.append(LabelSelectorRequirement(key.strip(), "NotIn", [val.strip()]))
            elif "=" in term:
                key, _, val = term.replace("==", "=").partition("=")
                labels[key.strip()] = val.strip()
            elif term.startswith("!"):
                exprs.append(LabelSelectorRequirement(term[1:].strip(), "DoesNotExist"))
            else:
                exprs.append(LabelSelectorRequirement(term, "Exists"))
    return LabelSelector(match_labels=labels, match_expressions=exprs)
