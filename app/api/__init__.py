"""HTTP: the service's API, one room per kind of thing it holds.

- `rest/`: the REST resources (sessions, memory, runs, processes, delegation, events,
  schedules, webhooks, and the server-wide catalogues: agents, models, tools, event types)
  and their request and response models;
- `streams/`: the live timelines over Server-Sent Events: their routes, their frames, a run
  in stream mode, and the end of a stream whose key is revoked;
- `ag_ui/`: the AG-UI protocol over sessions and runs; each external protocol gets a folder
  of its own beside it;
- `http/`: what every request shares: the `Annotated` dependencies, problem+json, the
  Idempotency-Key, list pages, response views, the body limit, CORS, the access log and
  the Prometheus metrics;
- `ops/`: the operations routes: health, readiness, the metrics exposition, debug gauges;
- `openapi/`: the OpenAPI document as the contract, its examples, the /docs pages;
- `routes.py`: every router, included in one place.
"""
