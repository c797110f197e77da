"""The operations routes: liveness, readiness and the Prometheus exposition (`routes.py`),
and the test-only gauges (`debug.py`). None needs a key."""
