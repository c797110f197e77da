"""`GET /v1/event-types`: the event vocabulary, each type with its payload's JSON Schema.

Server-wide, the same for every tenant; any valid key may read it. A client can check what
it reads from the event list and the streams against it; the catalogue is generated from
the runtime's payload models, so it describes what this release writes.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.api.http.deps import TenantDep
from app.api.http.problems import problem_responses
from app.api.rest.schemas import EventTypeList
from app.runtime.session.event_catalogue import event_catalogue

router = APIRouter(prefix="/v1", tags=["events"])


@router.get(
    "/event-types",
    response_model=EventTypeList,
    summary="Every event type, with a description and its payload's JSON Schema",
    responses=problem_responses(401),
)
async def list_event_types(tenant: TenantDep) -> dict:
    """The event catalogue: every event type, what it records, and its payload's JSON
    Schema. Generated from the payload models the runtime writes with, so it cannot drift.
    """
    return {"data": [info.to_json() for info in event_catalogue()]}
