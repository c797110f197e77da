"""AG-UI history reconciliation: what of a `RunAgentInput`'s messages the session lacks.

AG-UI clients send the whole conversation on every call. The session's memory is the record,
so each call appends only what memory has not seen, recognised by message id:

- user, system and developer messages carry their AG-UI id on the memory item (`id`);
- assistant messages the service streamed have ids it minted (`asr_…`, see `ag_ui_stream`),
  and their tool calls are memory's `function_call` items (AG-UI tool call id = `call_id`);
- a tool message answering a pending client tool call becomes that call's output; one for a
  call that already has an output is a resend.

Decided on the session as loaded, so the caller writes the result in the same transaction
as the run's start, conditional on the session being unchanged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    FunctionCall,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from app.runtime.memory.items import normalize_items
from app.runtime.session.state import SessionState

# Ids of assistant messages, reasoning and tool results that the service minted itself.
MINTED_PREFIX = "asr_"
# Memory keeps ids of up to this many characters; a longer AG-UI id is kept as its digest.
_MAX_ID = 128


def stored_id(message_id: str) -> str:
    """The id a message is known by in memory (AG-UI ids are unbounded strings)."""
    if len(message_id) <= _MAX_ID:
        return message_id
    return "sha256:" + hashlib.sha256(message_id.encode()).hexdigest()


@dataclass
class History:
    """What a call's messages add to the session."""

    items: list[dict[str, Any]] = field(default_factory=list)  # appended as they are
    answers: list[dict[str, str]] = field(default_factory=list)  # pending client calls
    input: str | list[dict[str, Any]] | None = None  # the trailing new user message
    input_id: str | None = None


def known_ids(state: SessionState) -> tuple[set[str], set[str], set[str]]:
    """(message ids, tool call ids, answered call ids) that memory already holds."""
    messages: set[str] = set()
    calls: set[str] = set()
    answered: set[str] = set()
    for item in state.items:
        kind = item.get("type")
        if kind == "message" and item.get("id"):
            messages.add(item["id"])
        elif kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            answered.add(item["call_id"])
    return messages, calls, answered


def reconcile(
    messages: list[Message], state: SessionState, *, max_inline_bytes: int, as_input: bool = True
) -> History:
    """The part of `messages` that `state` has not seen, as memory items and answers.

    A trailing new user message becomes the run's input (a USER_INPUT, as on every run)
    unless answers to client tool calls come with it (or not `as_input`): a run may not
    start on new input while calls wait, so then it is appended before the run continues.
    """
    seen, calls, answered = known_ids(state)
    pending_client = {cid for cid, c in state.pending.items() if c.get("kind") == "client"}
    history = History()
    raw: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id in answered:
                continue
            output = _text(message.content)
            if message.error:
                output = f"error: {message.error}"
            if call_id in pending_client:
                history.answers.append({"call_id": call_id, "output": output})
            elif call_id in calls and call_id not in state.pending:
                # A call the client's own history holds (never one waiting for an approval
                # or a server tool: their outputs are the service's to write).
                raw.append({"type": "function_call_output", "call_id": call_id, "output": output})
            answered.add(call_id)
            continue
        known = stored_id(message.id)
        if known in seen or message.id.startswith(MINTED_PREFIX):
            continue
        seen.add(known)
        if isinstance(message, UserMessage):
            raw.append(_message_item(known, "user", message.content))
        elif isinstance(message, SystemMessage | DeveloperMessage):
            raw.append(_message_item(known, "system", message.content))
        elif isinstance(message, AssistantMessage):
            if message.content:
                raw.append(_message_item(known, "assistant", message.content))
            for call in message.tool_calls or []:
                if call.id not in calls:
                    calls.add(call.id)
                    raw.append(
                        {
                            "type": "function_call",
                            "call_id": call.id,
                            "name": call.function.name,
                            "arguments": call.function.arguments or "{}",
                        }
                    )
        # Activity and reasoning messages are the client's display; memory has no place
        # for them.
    items = normalize_items(raw, max_inline_bytes=max_inline_bytes)
    last = items[-1] if items else None
    trailing_user = last is not None and last["type"] == "message" and last["role"] == "user"
    if trailing_user and as_input and not history.answers:
        assert last is not None
        history.input, history.input_id = last["content"], last.get("id")
        items = items[:-1]
    history.items = items
    return history


def _message_item(message_id: str, role: str, content: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": _content(content), "id": message_id}


def _content(content: Any) -> str | list[dict[str, Any]]:
    """AG-UI content (a string or parts) as memory content; only text parts have a place."""
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": p.text} for p in content if getattr(p, "type", "") == "text"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [getattr(p, "text", None) for p in content]
    texts = [p for p in parts if isinstance(p, str)]
    return "".join(texts) if texts else json.dumps([p.model_dump() for p in content])


def lags_behind(messages: list[Message], state: SessionState, history: History) -> bool:
    """Whether the client's history lacks conversation that memory holds (a page reloaded
    without its history, another client on the same thread): it then gets a snapshot.

    Counted in user messages: those the client sent that memory already has must be all
    of memory's."""
    new = sum(1 for i in history.items if i.get("role") == "user") + (history.input is not None)
    client_users = sum(1 for m in messages if isinstance(m, UserMessage)) - new
    memory_users = sum(
        1 for i in state.items if i.get("type") == "message" and i.get("role") == "user"
    )
    return client_users < memory_users


def snapshot_messages(items: list[dict[str, Any]]) -> list[Message]:
    """Memory items as AG-UI messages. Items without a client id get minted ones, which a
    client that sends them back has recognised as the service's own."""
    out: list[Message] = []
    for n, item in enumerate(items):
        kind = item.get("type")
        minted = f"{MINTED_PREFIX}item_{n}"
        if kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else _text_parts(content)
            message_id = item.get("id") or minted
            role = item["role"]
            if role == "user":
                out.append(UserMessage(id=message_id, content=text))
            elif role == "system":
                out.append(SystemMessage(id=message_id, content=text))
            else:
                out.append(AssistantMessage(id=message_id, content=text))
        elif kind == "function_call":
            call = ToolCall(
                id=item["call_id"],
                function=FunctionCall(name=item["name"], arguments=item.get("arguments", "{}")),
            )
            last = out[-1] if out else None
            if isinstance(last, AssistantMessage):
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                out.append(AssistantMessage(id=minted, tool_calls=[call]))
        elif kind == "function_call_output":
            out.append(
                ToolMessage(
                    id=f"{MINTED_PREFIX}result_{item['call_id']}",
                    tool_call_id=item["call_id"],
                    content=item.get("output", ""),
                )
            )
    return out


def _text_parts(parts: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in parts if p.get("type") == "text")
