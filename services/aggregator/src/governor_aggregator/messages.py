"""The aggregator's load messages, as pure functions of window accumulators."""

from __future__ import annotations

from collections.abc import Iterable

from governor import events
from governor.events import WindowKind
from governor.pod_totals import PodTotals, with_totals
from governor.windows import WindowAcc, to_load_window


def load_message(
    workload: str,
    metric: str,
    closed: Iterable[tuple[WindowKind, WindowAcc]],
    open_: Iterable[tuple[WindowKind, WindowAcc]],
    totals: PodTotals | None = None,
) -> events.LoadWindow | None:
    """One message for a series: the windows that closed, then the open windows' estimates."""
    views = [to_load_window(a, workload, metric, k, closed=True) for k, a in closed]
    views += [to_load_window(a, workload, metric, k, closed=False) for k, a in open_]
    if not views:
        return None
    first, *rest = (with_totals(v, totals) for v in views)
    fields = events.WindowView.__struct_fields__
    first.more = [events.WindowView(**{f: getattr(v, f) for f in fields}) for v in rest]
    return first


def signature(opened: list[tuple[WindowKind, WindowAcc]]) -> tuple[tuple[float, int], ...]:
    return tuple((a.start, a.count) for _, a in opened)
