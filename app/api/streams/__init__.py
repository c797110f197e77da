"""The live timelines over Server-Sent Events: the routes and stream tokens (`routes.py`,
their models in `schemas.py`), the frames and cursors (`frames.py`), a run in stream mode
(`run_response.py`), and the middleware that ends a stream when its key is revoked
(`revocation.py`). The delivery itself is `app/live`'s."""
