"""Trace replay: governor's policies and the reference HPA on the same load, side by side.

traces   — `timestamp,value` CSV files and the real traces built into the wheel
replay   — the loop: per-second samples -> governor.windows -> governor.policy.evaluate -> replicas
replicas — the replica model (start-up delay, immediate removal)
policies — governor's default policy (default_policy.yaml), the reference HPA, user files
runs     — running several policies on one trace and writing the outputs
report   — CSVs, summary.json, the chart and the HTML report
"""
