"""The AG-UI protocol (CopilotKit frontends): `POST /v1/ag-ui` (`routes.py`), re-attaching
to a thread and stopping its run (`connect.py`), the reconciling of a client's history with
the session's memory (`history.py`), the translation of a run's events into AG-UI events
(`stream.py`), and the request body in our OpenAPI document (`schema.py`). A thin
translation over the run service and the ledger, keeping no state of its own."""
