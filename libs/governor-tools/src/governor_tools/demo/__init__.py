"""`governor demo`: the whole stack on one machine, replaying real traces, time-compressed.

- `scenario`: what the demo creates (pure): the pool's nodes and Koordinator Devices, two web
  services and an elastic PyTorchJob, their ScalingPolicies, the load each service is offered
  (segments of a real trace), all with trace-time durations scaled by `--speed`.
- `stack`: the processes (Kafka and the control plane through the project's scripts, every
  governor service as a subprocess, logs under out/demo-stack/).
- `kwatch`: list + watch of one resource on the API server (the workload simulator and the
  demo's test read the cluster through it).
- `kubelet`: the workload simulator standing in for the kubelets (as KWOK does).
- `view`: the live terminal view (rich) and the headless progress lines.
- `report`: the HTML/PNG report, next to the reference HPA in the simulator.
- `run`: the orchestration behind `governor demo`.
"""
