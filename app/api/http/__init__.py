"""What every route shares: the `Annotated` dependencies (`deps.py`), problem+json
(`problems.py`), the Idempotency-Key (`idempotency.py`), keyset pages (`pages.py`), runtime
objects as response dicts (`views.py`), the body limit and JSON shape check (`limits.py`)
and CORS (`cors.py`)."""
