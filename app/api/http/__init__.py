"""What every request shares: the `Annotated` dependencies (`deps.py`), what every input is
held to (`inputs.py`: the request bodies' base, the session id pattern, the largest seq),
problem+json (`problems.py`), the Idempotency-Key (`idempotency.py`), keyset pages
(`pages.py`), runtime objects as response dicts (`views.py`), the body limit and JSON shape
check (`limits.py`), CORS (`cors.py`), the request id, access log and HTTP metrics
(`access.py`), and every Prometheus metric of the service (`metrics.py`, the runtime's
Observer)."""
