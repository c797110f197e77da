"""HTTP models of the webhook routes (kept apart from `schemas.py`, which is long enough)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from app.api.http.inputs import SESSION_ID_PATTERN, RequestBody

EVENT_TYPE_PATTERN = r"^(\*|[A-Z_]{1,64})$"
EventTypeName = Annotated[str, Field(pattern=EVENT_TYPE_PATTERN)]


class WebhookCreate(RequestBody):
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Where deliveries are POSTed (http or https; public addresses only unless "
        "the operator allows a network).",
        examples=["https://example.com/hooks/asr"],
    )
    event_types: list[EventTypeName] = Field(
        min_length=1,
        max_length=64,
        description="The event types to deliver (GET /v1/event-types), or `*` for every type.",
        examples=[["RUN_FINISHED", "APPROVAL_REQUESTED"]],
    )
    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description="Only this session's events."
    )
    metadata_filter: dict[str, str | int | float | bool] | None = Field(
        default=None,
        max_length=16,
        description="Only events of sessions whose metadata holds each key with this value.",
        examples=[{"team": "support"}],
    )
    description: str | None = Field(default=None, max_length=256)


class WebhookPatch(RequestBody):
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    event_types: list[EventTypeName] | None = Field(default=None, min_length=1, max_length=64)
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN)
    metadata_filter: dict[str, str | int | float | bool] | None = Field(default=None, max_length=16)
    description: str | None = Field(default=None, max_length=256)
    state: Literal["active", "disabled"] | None = Field(
        default=None,
        description="`disabled` stops deliveries (pending ones wait); `active` resumes them "
        "and clears a disabled subscription's failure count.",
    )


class WebhookRead(BaseModel):
    webhook_id: str
    url: str
    event_types: list[str]
    session_id: str | None
    metadata_filter: dict[str, Any] | None
    description: str | None
    state: Literal["active", "disabled"]
    disabled_reason: str | None = Field(
        description="`disabled_by_tenant`, or `deliveries_failing` when a delivery used up its "
        "retries."
    )
    consecutive_failures: int
    last_success_at: datetime | None
    last_failure_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WebhookCreated(WebhookRead):
    secret: str = Field(
        description="The signing secret (`whsec_...`), shown in this answer only. Verify "
        "deliveries with any Standard Webhooks library."
    )


class WebhookList(BaseModel):
    data: list[WebhookRead]
    next_cursor: str | None


class DeliveryRead(BaseModel):
    delivery_id: str = Field(description="The event's id; also the `webhook-id` header.")
    webhook_id: str
    session_id: str
    seq: int
    event_type: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: datetime | None = Field(description="When a pending delivery is due.")
    last_attempt_at: datetime | None
    last_error: str | None
    response_code: int | None
    delivered_at: datetime | None
    created_at: datetime


class DeliveryList(BaseModel):
    data: list[DeliveryRead]
    next_cursor: str | None
