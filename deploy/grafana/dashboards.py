"""governor's Grafana dashboards, generated with grafana-foundation-sdk (Grafana 11.6 schema).

    uv run python deploy/grafana/dashboards.py          # (re)writes deploy/grafana/dashboards/

Three dashboards, every query a PromQL expression over the metrics of docs/metrics.md:

* Overview (uid governor-overview): per workload, load vs target, replicas (current, desired,
  min, max), decisions by direction and by the rule that bound them, panic mode, metric sources.
* Pipeline (uid governor-pipeline): throughput of every stage, consumer lag per topic, latency
  p50/p99 (newest sample -> decision, decision -> patch), dead letters, actuator outcomes and
  Kubernetes API errors, services up.
* Capacity (uid governor-capacity): per pool, capacity vs allocation by resource, GPU and RDMA
  use, shortfall (by resource and per workload), elastic jobs (replicas, restarts), stage 2 time.

The JSON files are committed; tests/unit/test_dashboards.py regenerates them and fails on a
diff, and tests/integration/test_observability_e2e.py evaluates every query against a real
Prometheus scraping the running services. Template variables: `datasource` (a Prometheus data
source), `workload` (Overview) and `pool` (Capacity), both multi-value regexes with "All".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

OUT = Path(__file__).resolve().parent / "dashboards"
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
TAGS = ["governor", "generated"]


def _query(expr: str, legend: str, ref: str) -> prom.Dataquery:
    return prom.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def _targets(panel: timeseries.Panel | statetimeline.Panel, queries: list[tuple[str, str]]) -> None:
    for i, (expr, legend) in enumerate(queries):
        panel.with_target(_query(expr, legend, chr(ord("A") + i)))


def series(
    title: str,
    queries: list[tuple[str, str]],
    *,
    unit: str = "short",
    description: str = "",
    width: int = 12,
    stack: bool = False,
) -> timeseries.Panel:
    """A time series panel: `queries` are (PromQL, legend format)."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .height(8)
        .span(width)
        .line_width(1)
        .fill_opacity(10 if not stack else 40)
    )
    if stack:
        panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    _targets(panel, queries)
    return panel


def states(
    title: str, queries: list[tuple[str, str]], *, description: str = ""
) -> statetimeline.Panel:
    panel = (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .height(6)
        .span(24)
    )
    _targets(panel, queries)
    return panel


def _datasource_var() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _label_var(name: str, label: str, metric: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": f"label_values({metric}, {name})", "refId": "vars"})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def _dashboard(
    uid: str, title: str, description: str, *variables: dash.QueryVariable
) -> dash.Dashboard:
    """A governor dashboard: its data source variable, then `variables`."""
    board = (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(_datasource_var())
    )
    for v in variables:
        board = board.with_variable(v)
    return board


def overview() -> dash.Dashboard:
    w = '{workload=~"$workload"}'
    return (
        _dashboard(
            "governor-overview",
            "governor / Overview",
            "Per workload: load vs target, replicas, decisions and why.",
            _label_var("workload", "Workload", "governor_decider_replicas"),
        )
        .with_row(dash.Row("Load and replicas"))
        .with_panel(
            series(
                "Load vs target",
                [
                    (f"governor_decider_metric_value{w}", "{{workload}} {{metric}}"),
                    (
                        f"governor_decider_metric_target{w}",
                        "{{workload}} {{metric}} target ({{target_type}})",
                    ),
                ],
                description="The stable-window value each evaluation saw and the policy's "
                "target (AverageValue: the load is the total over replicas).",
            )
        )
        .with_panel(
            series(
                "Replicas: current and desired",
                [
                    (
                        'governor_decider_replicas{workload=~"$workload",kind=~"current|desired"}',
                        "{{workload}} {{kind}}",
                    ),
                    (
                        'governor_decider_replicas{workload=~"$workload",kind=~"min|max"}',
                        "{{workload}} {{kind}}",
                    ),
                ],
                description="current = observed (or in flight), desired = stage 1's damped "
                "recommendation; min and max from the policy.",
            )
        )
        .with_panel(
            series(
                "Shadow policies against the active one",
                [
                    (
                        'governor_decider_replicas{workload=~"$workload",kind="current"}',
                        "{{workload}} active",
                    ),
                    (
                        'governor_decider_shadow_replicas{workload=~"$workload"}',
                        "{{workload}} shadow {{policy}}",
                    ),
                ],
                description="The replicas each Shadow policy's arm asked for (never actuated) "
                "beside the active policy's; `governor ab` scores them.",
            )
        )
        .with_row(dash.Row("Decisions"))
        .with_panel(
            series(
                "Decisions by reason",
                [
                    (
                        f"sum by (workload, rule) "
                        f"(increase(governor_decider_workload_decisions_total{w}[{RATE}]))",
                        "{{workload}} {{rule}}",
                    )
                ],
                description="Decisions published, by the rule that bound them (tolerance, "
                "stabilization, rate_limit, panic, capacity, priority, ...).",
                stack=True,
            )
        )
        .with_panel(
            series(
                "Decisions by direction",
                [
                    (
                        f"sum by (workload, direction) "
                        f"(increase(governor_decider_workload_decisions_total{w}[{RATE}]))",
                        "{{workload}} {{direction}}",
                    )
                ],
                description="up, down, or same (a resend of a request not taken up in time).",
                stack=True,
            )
        )
        .with_panel(
            states(
                "Panic mode",
                [(f"governor_decider_panic_mode{w}", "{{workload}}")],
                description="1 while the short window drives the workload (no scale-down).",
            )
        )
        .with_row(dash.Row("Metric sources"))
        .with_panel(
            series(
                "Metric sources up",
                [(f"governor_collector_source_up{w}", "{{workload}} {{metric}} ({{source}})")],
                description="0: the last poll failed — the workload's input is frozen "
                "(governor holds, it never scales down on missing data).",
                width=24,
            )
        )
    )


def pipeline() -> dash.Dashboard:
    def lat(q: str, metric: str) -> tuple[str, str]:
        return (
            f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[{RATE}])))",
            f"p{round(float(q) * 100)}",
        )

    return (
        _dashboard(
            "governor-pipeline",
            "governor / Pipeline",
            "Throughput, lag, latency and dead letters of collector -> aggregator -> decider "
            "-> actuator.",
        )
        .with_row(dash.Row("Throughput"))
        .with_panel(
            series(
                "Samples",
                [
                    (
                        "sum by (source) "
                        f"(rate(governor_collector_samples_published_total[{RATE}]))",
                        "published by collector ({{source}})",
                    ),
                    (
                        f"sum by (outcome) (rate(governor_aggregator_samples_total[{RATE}]))",
                        "aggregated ({{outcome}})",
                    ),
                ],
                unit="ops",
            )
        )
        .with_panel(
            series(
                "Windows, evaluations, decisions",
                [
                    (
                        f"sum by (window, state) (rate(governor_aggregator_windows_total[{RATE}]))",
                        "windows {{window}} {{state}}",
                    ),
                    (
                        f"sum by (trigger) (rate(governor_decider_evaluations_total[{RATE}]))",
                        "evaluations ({{trigger}})",
                    ),
                    (
                        f"sum by (rule) (rate(governor_decider_decisions_total[{RATE}]))",
                        "decisions ({{rule}})",
                    ),
                ],
                unit="ops",
            )
        )
        .with_panel(
            series(
                "Actuations by outcome",
                [
                    (
                        f"sum by (outcome) (rate(governor_actuator_actuations_total[{RATE}]))",
                        "{{outcome}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_panel(
            series(
                "Messages consumed by topic",
                [
                    (
                        f"sum by (topic) (rate(governor_bus_consumed_messages_total[{RATE}]))",
                        "{{topic}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_row(dash.Row("Lag and latency"))
        .with_panel(
            series(
                "Consumer lag",
                [("sum by (topic, group) (governor_bus_consumer_lag)", "{{topic}} ({{group}})")],
                description="Messages not yet handled, per topic and consumer group.",
            )
        )
        .with_panel(
            series(
                "Newest sample -> decision",
                [
                    lat("0.5", "governor_decider_sample_to_decision_seconds"),
                    lat("0.99", "governor_decider_sample_to_decision_seconds"),
                ],
                unit="s",
                description="Event time of the newest input sample to the decision's "
                "publication. Target: p99 <= 1 s.",
            )
        )
        .with_panel(
            series(
                "Decision -> patch",
                [
                    lat("0.5", "governor_actuator_decision_to_patch_seconds"),
                    lat("0.99", "governor_actuator_decision_to_patch_seconds"),
                ],
                unit="s",
                description="The decision's decided_at to the API server's answer to its patch.",
            )
        )
        .with_row(dash.Row("Errors"))
        .with_panel(
            series(
                "Dead letters",
                [
                    (
                        "sum by (topic, reason) "
                        f"(increase(governor_bus_dead_letters_total[{RATE}]))",
                        "{{topic}} {{reason}}",
                    )
                ],
                description="Messages moved to <topic>.dlq, by source topic and reason.",
            )
        )
        .with_panel(
            series(
                "Metric source errors",
                [
                    (
                        f"sum by (source, reason) "
                        f"(increase(governor_collector_source_errors_total[{RATE}]))",
                        "{{source}} {{reason}}",
                    ),
                    (
                        f"sum by (code) (increase(governor_collector_push_requests_total[{RATE}]))",
                        "push HTTP {{code}}",
                    ),
                ],
            )
        )
        .with_panel(
            series(
                "Actuator refusals and failures",
                [
                    (
                        f"sum by (outcome, reason) (increase(governor_actuator_actuations_total"
                        f'{{outcome=~"refused|failed"}}[{RATE}]))',
                        "{{outcome}} {{reason}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                "Kubernetes API errors",
                [
                    (
                        f"sum by (code) (increase(governor_actuator_kube_errors_total[{RATE}]))",
                        "HTTP {{code}}",
                    )
                ],
                description="By HTTP status (0: no answer), retried ones included.",
            )
        )
        .with_panel(
            series(
                "Services up",
                [('up{job=~"governor-.*"}', "{{job}} {{instance}}")],
            )
        )
    )


def capacity() -> dash.Dashboard:
    p = '{pool=~"$pool"}'

    def resource(r: str) -> str:
        return f'{{pool=~"$pool",resource="{r}"}}'

    return (
        _dashboard(
            "governor-capacity",
            "governor / Capacity",
            "Per pool: capacity, allocation, GPU and RDMA use, shortfall, elastic jobs.",
            _label_var("pool", "Pool", "governor_decider_pool_capacity"),
        )
        .with_row(dash.Row("Pools"))
        .with_panel(
            series(
                "Capacity and allocation by resource",
                [
                    (f"governor_decider_pool_capacity{p}", "{{pool}} {{resource}} capacity"),
                    (f"governor_decider_pool_allocated{p}", "{{pool}} {{resource}} allocated"),
                ],
                description="Capacity: allocatable minus unmanaged requests (GPUs and RDMA VFs "
                "from healthy devices). Allocated: what the granted replicas request.",
            )
        )
        .with_panel(
            series(
                "GPU and RDMA use",
                [
                    (
                        f"governor_decider_pool_allocated{resource('nvidia.com/gpu')} / "
                        f"governor_decider_pool_capacity{resource('nvidia.com/gpu')}",
                        "{{pool}} GPU",
                    ),
                    (
                        f"governor_decider_pool_allocated{resource('koordinator.sh/rdma')} / "
                        f"governor_decider_pool_capacity{resource('koordinator.sh/rdma')}",
                        "{{pool}} RDMA",
                    ),
                ],
                unit="percentunit",
            )
        )
        .with_row(dash.Row("Shortfall"))
        .with_panel(
            series(
                "Shortfall by resource",
                [(f"governor_decider_pool_shortfall{p}", "{{pool}} {{resource}}")],
                description="What the replicas wanted but not granted would need, by the "
                "resource that ran out (governor.shortfalls carries the details).",
            )
        )
        .with_panel(
            series(
                "Replicas short per workload",
                [(f"governor_decider_shortfall_replicas{p}", "{{workload}} ({{pool}})")],
            )
        )
        .with_panel(
            series(
                "Shortfall records published",
                [
                    (
                        f"sum by (pool) (increase(governor_decider_shortfalls_total{p}[{RATE}]))",
                        "{{pool}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                "Stage 2 (allocation) time p99",
                [
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(governor_decider_pool_allocation_seconds_bucket[{RATE}])))",
                        "p99",
                    )
                ],
                unit="s",
            )
        )
        .with_row(dash.Row("Elastic training jobs"))
        .with_panel(
            series(
                "Elastic jobs: replicas",
                [
                    (
                        'governor_decider_replicas{kind=~"current|desired"} '
                        "and on (workload) governor_decider_elastic_restarts",
                        "{{workload}} {{kind}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                "Elastic jobs: restarts",
                [("governor_decider_elastic_restarts", "{{workload}}")],
                description="Every membership change restarts the workers from a checkpoint.",
            )
        )
    )


DASHBOARDS = {"overview": overview, "pipeline": pipeline, "capacity": capacity}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    return {
        f"{name}.json": encoder.encode(make().build()) + "\n" for name, make in DASHBOARDS.items()
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        json.loads(text)  # valid JSON, or fail here
        (out / name).write_text(text)
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
