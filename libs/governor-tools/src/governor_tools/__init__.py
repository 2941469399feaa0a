"""What people run, not services: the simulator and scenario runner, the demo, reports and the CLI.

The services import the runtime library `governor` alone; this package adds matplotlib, rich
and the trace datasets on top of it.
"""
