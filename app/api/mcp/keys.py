"""The run start's idempotency key of an MCP call: its JSON-RPC request id, scoped.

Request ids are small integers that every client counts from zero, so the id alone would
let two clients of one tenant meet on one run. The key is scoped, within the caller's
tenant (idempotency keys are per tenant), by:

- the client's connection id when it has one: the transport is stateless, so the endpoint
  hands every client an opaque `Mcp-Session-Id` at `initialize` that names nothing on the
  server; the client repeats it on each request, retries and `notifications/cancelled`
  included, so a cancel finds its call's run on any replica from the id alone;
- else (a client of the stateless 2026 revision, which has no connection) the tool and its
  arguments: a retry repeats them, another client's request with the same id does not.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mcp.types import RequestId

from app.runtime.ports import IdempotencyToken


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def call_token(
    connection: str | None, request_id: RequestId, tool: str, arguments: dict[str, Any]
) -> IdempotencyToken:
    """The key of one call; a retry of it (same request id, same connection or arguments)
    gets the same key, so its run starts once."""
    rid = json.dumps(request_id)
    if connection:
        digest = _digest("connection", connection, rid)
    else:
        args = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
        digest = _digest("call", rid, tool, args)
    return IdempotencyToken(key=f"mcp:{digest[:48]}", request_hash=digest)


def cancel_token(connection: str, request_id: RequestId) -> IdempotencyToken:
    """The key of the call a `notifications/cancelled` names (connection-scoped calls only)."""
    digest = _digest("connection", connection, json.dumps(request_id))
    return IdempotencyToken(key=f"mcp:{digest[:48]}", request_hash=digest)


def new_session_id(token: IdempotencyToken) -> str:
    """The session a call without `session_id` creates, derived from its key: a retry whose
    first attempt created the session but never started its run finds it again."""
    return "mcp-" + token.request_hash[:40]
