"""A load message carries several windows of one series (LoadWindow.more); `views` splits it."""

from __future__ import annotations

import msgspec

from governor import events
from governor.windows import views


def view(kind: str, start: float, closed: bool) -> dict[str, object]:
    return dict(
        window=kind,
        start=start,
        end=start + 6,
        count=3,
        mean=1.0,
        max=2.0,
        p95=2.0,
        newest_sample=start + 5,
        closed=closed,
    )


def test_views_give_each_window_as_a_load_window_in_order() -> None:
    msg = events.LoadWindow(
        workload="ns/Deployment/a",
        metric="rps",
        **view("panic", 0.0, True),  # type: ignore[arg-type]
        more=[
            events.WindowView(**view("stable", 0.0, False)),  # type: ignore[arg-type]
            events.WindowView(**view("panic", 2.0, False)),  # type: ignore[arg-type]
        ],
    )
    got = views(msg)
    assert [(w.window, w.start, w.closed) for w in got] == [
        ("panic", 0.0, True),
        ("stable", 0.0, False),
        ("panic", 2.0, False),
    ]
    assert all(w.workload == "ns/Deployment/a" and w.metric == "rps" and not w.more for w in got)


def test_an_old_reader_reads_the_first_view_and_a_new_reader_an_old_message() -> None:
    msg = events.LoadWindow(
        workload="ns/Deployment/a",
        metric="rps",
        **view("stable", 0.0, True),  # type: ignore[arg-type]
        more=[events.WindowView(**view("panic", 0.0, True))],  # type: ignore[arg-type]
    )
    wire = msgspec.json.encode(msg)

    class OldLoadWindow(msgspec.Struct):  # the shape before `more`
        workload: str
        metric: str
        window: str
        start: float
        closed: bool = True

    old = msgspec.json.decode(wire, type=OldLoadWindow)
    assert (old.window, old.start, old.closed) == ("stable", 0.0, True)
    before = b'{"workload":"w","metric":"m","window":"panic","start":0,"end":6,"count":1,'
    before += b'"mean":1,"max":1,"p95":1,"newest_sample":1}'
    new = msgspec.json.decode(before, type=events.LoadWindow)
    assert views(new) == [new] and new.more == []
