"""governor-actuator: the only writer to Kubernetes: one fenced JSON patch per decision"""
