"""The OpenAPI document as the contract (`document.py`), the examples of every operation
(`examples.py`), and the /docs and /redoc pages served with their own assets (`docs.py`)."""
