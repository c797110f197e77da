"""What an A2A message says: the text a new task runs on, or the answer to a task that
waits in INPUT_REQUIRED.

The answer to a task waiting for input is its next message (same `taskId`):

- an approval: a DataPart `{"approve": true}` or `{"approve": false, "reason": "..."}`
  (with `"call_id"` to decide one call of several), or the text `approve` / `reject`
  (also `yes` / `no`): it decides every call waiting for approval;
- a client tool's output: a DataPart `{"call_id": "...", "output": "..."}` (one per call),
  or, with exactly one call waiting, any text (the output);
- a question the agent asked (no call waiting): the text, written as the user's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from a2a.types.a2a_pb2 import Message
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok"})
REJECT_WORDS = frozenset({"reject", "rejected", "no", "n", "deny"})


@dataclass(slots=True)
class Reply:
    """A message's content, sorted by what it can mean."""

    text: str
    data: list[dict[str, Any]] = field(default_factory=list)


def read_message(message: Message) -> Reply:
    """Text parts joined by newlines; data parts as objects. A file part is refused: the
    agents here read text."""
    texts: list[str] = []
    data: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            value = MessageToDict(part.data)
            if not isinstance(value, dict):
                raise InvalidParamsError(message="a data part must hold a JSON object")
            data.append(value)
        else:
            raise InvalidParamsError(message="only text and data parts are accepted")
    return Reply(text="\n".join(texts), data=data)


def run_input(reply: Reply) -> str:
    """A new task's input: its text, with any data parts appended as JSON."""
    chunks = [reply.text] if reply.text else []
    chunks += [json.dumps(d, ensure_ascii=False) for d in reply.data]
    if not chunks:
        raise InvalidParamsError(message="the message has no text or data to run on")
    return "\n".join(chunks)


def decisions(reply: Reply, waiting: list[str]) -> dict[str, tuple[str, str | None]]:
    """Approval decisions by call id, from a reply to calls waiting for approval."""
    out: dict[str, tuple[str, str | None]] = {}
    for d in reply.data:
        if "approve" not in d:
            continue
        approve = d["approve"]
        if not isinstance(approve, bool):
            raise InvalidParamsError(message='"approve" must be true or false')
        reason = d.get("reason") if isinstance(d.get("reason"), str) else None
        targets = [d["call_id"]] if isinstance(d.get("call_id"), str) else waiting
        for call_id in targets:
            if call_id not in waiting:
                raise InvalidParamsError(message=f"no call {call_id} waits for approval")
            out[call_id] = ("approve" if approve else "reject", reason)
    word = reply.text.strip().lower().rstrip(".!")
    if not out and (word in APPROVE_WORDS or word in REJECT_WORDS):
        decision = "approve" if word in APPROVE_WORDS else "reject"
        out = {call_id: (decision, None) for call_id in waiting}
    return out


def tool_outputs(reply: Reply, waiting: list[str]) -> list[dict[str, Any]]:
    """Client tool outputs by call id, from a reply to calls waiting for one."""
    out = [
        {"call_id": d["call_id"], "output": _output(d["output"])}
        for d in reply.data
        if isinstance(d.get("call_id"), str) and "output" in d
    ]
    if not out and len(waiting) == 1 and reply.text:
        out = [{"call_id": waiting[0], "output": reply.text}]
    for o in out:
        if o["call_id"] not in waiting:
            raise InvalidParamsError(message=f"no client tool call {o['call_id']} waits")
    return out


def _output(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
