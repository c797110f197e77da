"""`SqliteErasure`: SQLite reads a JSON field with `json_extract`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, func

from app.store.erasure import ErasureStore
from app.store.tables import idempotency_keys


class SqliteErasure(ErasureStore):
    """The erasure store on SQLite."""

    def _result_session(self) -> ColumnElement[Any]:
        return func.json_extract(idempotency_keys.c.result, "$.session_id")
