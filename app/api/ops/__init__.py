"""Operations: liveness, readiness and the metrics route (`routes.py`), every Prometheus
metric (`metrics.py`), the per-request plumbing of request ids, access log and HTTP metrics
(`access.py`), and the test-only gauges (`debug.py`)."""
