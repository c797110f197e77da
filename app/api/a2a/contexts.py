"""An A2A `contextId` is a session of the caller's tenant, created on first use."""

from __future__ import annotations

import hashlib
import re
import uuid

from app.api.http.inputs import SESSION_ID_PATTERN
from app.runtime.errors import SessionAlreadyExists, SessionNotFound
from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.blueprints import Blueprints
from app.runtime.session.service import Loaded, SessionRuntime

# Session metadata: the client's contextId, when it is not itself a valid session id.
CONTEXT_KEY = "a2a_context_id"
# Session metadata marking the sessions A2A created (ListTasks without a context lists them).
MARK_KEY = "a2a"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def session_id_of(context_id: str) -> str:
    """The context's session: the id itself when it is a valid session id, else a stable
    digest of it (A2A context ids are free-form strings)."""
    if _SESSION_ID.match(context_id):
        return context_id
    return "a2a-" + hashlib.sha256(context_id.encode()).hexdigest()[:40]


async def open_context(
    runtime: SessionRuntime,
    tenant_id: str,
    context_id: str | None,
    *,
    blueprints: Blueprints,
    agent_name: str | None,
) -> Loaded:
    """The context's session (a new one, with a new id, when the message names none), with
    the agent the route names when it is created here."""
    if not context_id:
        context_id = str(uuid.uuid4())
    session_id = session_id_of(context_id)
    try:
        return await runtime.load(tenant_id, session_id)
    except SessionNotFound:
        pass
    agent = blueprints.spec(agent_name) if agent_name else AgentSpec()
    metadata = {MARK_KEY: "true"}
    if session_id != context_id:
        metadata[CONTEXT_KEY] = context_id
    if agent_name:
        metadata["a2a_agent"] = agent_name
    try:
        return await runtime.create(
            tenant_id,
            session_id=session_id,
            metadata=metadata,
            agent=agent.model_dump(),
            binding={},
        )
    except SessionAlreadyExists:
        return await runtime.load(tenant_id, session_id)
