"""HTTP models of the stream tokens (`POST /v1/stream-tokens`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.api.http.inputs import SESSION_ID_PATTERN, RequestBody


class StreamTokenCreate(RequestBody):
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="Scope the token to this session's stream; omit for all of the tenant's.",
    )
    ttl_seconds: int | None = Field(
        default=None, ge=10, le=3600, description="Lifetime; ASR_STREAM_TOKEN_TTL_SECONDS caps it."
    )


class StreamTokenRead(BaseModel):
    token: str = Field(description="Pass as `?token=` to the stream routes.")
    expires_at: datetime
    session_id: str | None
