"""`PostgresIdempotency`: a key is sealed by `asr_seal_idempotency` (the stored functions
of the writes that insert events seal their own keys, from `idempotency_args`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import IdempotentReplay
from app.runtime.ports import IdempotencyToken
from app.store.base import utcnow
from app.store.idempotency import IdempotencyStore

_SEAL = text(
    "SELECT asr_seal_idempotency(p_tenant => :tenant, p_key => :key, p_hash => :hash,"
    " p_now => :now, p_expires => :expires, p_result => CAST(:result AS jsonb))"
)


class PostgresIdempotency(IdempotencyStore):
    """Keys sealed by `asr_seal_idempotency`, or by the stored function of the write."""

    def function_args(self, token: IdempotencyToken | None) -> dict[str, Any]:
        """The key's parameters of a stored function that seals it itself."""
        key, digest, expires = self.idempotency_args(token)
        return {"p_idem_key": key, "p_idem_hash": digest, "p_idem_expires": expires}

    async def seal(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        token: IdempotencyToken | None,
        result: dict[str, Any],
    ) -> None:
        """`asr_seal_idempotency` inside the open transaction `conn` (a queued run's start,
        the one keyed write here that is not a function call of its own)."""
        if token is None:
            return
        key, digest, expires = self.idempotency_args(token)
        try:
            await conn.execute(
                _SEAL,
                {
                    "tenant": tenant_id,
                    "key": key,
                    "hash": digest,
                    "now": utcnow(),
                    "expires": expires,
                    "result": json.dumps(result),
                },
            )
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) == "AS006":
                raise IdempotentReplay(token.key) from None
            raise
