"""HTTP models of the operators' routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ErasureReceiptRead(BaseModel):
    """That an erasure happened: who asked, when, how many of each kind went; no content."""

    receipt_id: str
    tenant_id: str
    scope: str = Field(description="`session` or `tenant`.")
    session_id: str | None = Field(description="The erased session (scope `session`).")
    requested_by: str = Field(
        description="Who asked: `key:<prefix>` (a tenant's key), `admin-api`, or what the "
        "operator named on the command line."
    )
    erased_at: datetime
    counts: dict[str, int] = Field(
        description="Rows deleted per table, `sessions_erased` (delegated children included), "
        "`processes_stopped`, and `files` removed from workspaces; zero counts are left out."
    )


class ErasureReceiptList(BaseModel):
    data: list[ErasureReceiptRead]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page.")
