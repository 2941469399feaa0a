"""`cron`: KEDA's cron scaler, `desiredReplicas` inside the schedule's window and 0 outside.

No I/O: the value is `governor.policy.cron.cron_value(spec, now)` (the window in the spec's
timezone, KEDA's arithmetic); the sample says whether the window is open (label `window`). With
an AverageValue target of 1 (what the importer writes) the policy asks for exactly
`desiredReplicas` inside the window, and for minReplicas (or zero, with scaleToZero) outside it.
"""

from __future__ import annotations

from governor.events import MetricSample
from governor.policy.cron import cron_value, in_window
from governor.spec import CronSource as CronSpec
from governor_collector.sources.base import PullSource, register


@register
class CronSource(PullSource[CronSpec]):
    name = "cron"
    config_type = CronSpec

    async def collect(self, now: float) -> list[MetricSample]:
        window = "open" if in_window(self.config, now) else "closed"
        return [
            self.sample(
                cron_value(self.config, now), now, unit="replicas", labels={"window": window}
            )
        ]
