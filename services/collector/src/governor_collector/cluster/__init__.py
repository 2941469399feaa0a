"""The cluster side of the collector: ScalingPolicies, their targets, nodes, pods and devices
onto the compacted topics governor.policies, governor.workloads and governor.cluster.

Entry point: `governor_collector.cluster.cli:main` (console script `governor-cluster-collector`).
"""
