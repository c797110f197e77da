"""`PostgresErasure`: PostgreSQL reads a JSONB field as text with `->>`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement

from app.store.erasure import ErasureStore
from app.store.tables import idempotency_keys


class PostgresErasure(ErasureStore):
    """The erasure store on PostgreSQL."""

    def _result_session(self) -> ColumnElement[Any]:
        field: ColumnElement[Any] = idempotency_keys.c.result["session_id"].as_string()
        return field
