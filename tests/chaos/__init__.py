"""The chaos harness (issue 21): two instances of every service on the real broker and
kube-apiserver, a trace-driven load, faults injected and healed, and the checks over what the run
recorded. Shared by tests/integration/test_chaos.py and bench/chaos.py."""
