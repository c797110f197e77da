"""The scripted model: deterministic answers driven by directives in the latest user input.

| directive                  | answer                                                       |
| (none)                     | `echo: <input>`, completes                                   |
| [tool:NAME {json-args}]    | calls NAME with the args, then answers with the tool output  |
| [state:[json-patch]]       | calls update_state with that JSON Patch (several: one call    |
|                            | each, in order), then answers with the tool output           |
| [ask]                      | a question (ends with "?") -> NEEDS_USER_INPUT               |
| [continue:N]               | continuation-like output N times, then completes             |
| [fail]                     | the call raises -> ERROR, run fails                          |
| [sleep:MS]                 | waits MS ms before answering                                 |
| [words:N]                  | N words, streamed as deltas                                  |
| [pace:MS]                  | streams the answer's words MS ms apart (mid-turn tests)      |

Every answer is streamed word by word as delta frames.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from app.runtime.memory.items import estimate_tokens, item_text
from app.runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    OnDelta,
    ToolCallRequest,
)

_SIMPLE = re.compile(r"\[(ask|fail|continue:\d+|sleep:\d+|words:\d+|pace:\d+)\]")
_TOOL = re.compile(r"\[tool:([A-Za-z_][\w.-]*)")
_STATE = re.compile(r"\[state:")
UPDATE_STATE = "update_state"  # the built-in tool `[state:...]` calls
MAX_SLEEP_MS = 600_000
MAX_WORDS = 100_000
MAX_PACE_MS = 1000


@dataclass(frozen=True, slots=True)
class Directives:
    text: str
    tool: tuple[str, str] | None = None
    # `[state:[...]]` directives: the arguments of one update_state call each, in order.
    state_patches: tuple[str, ...] = ()
    ask: bool = False
    fail: bool = False
    continue_n: int = 0
    sleep_ms: int = 0
    words: int | None = None
    pace_ms: int = 0


def parse_directives(raw: str) -> Directives:
    """Directives found in `raw`, and the text with them removed."""
    found: dict[str, Any] = {}
    tool = None
    match = _TOOL.search(raw)
    rest = raw
    if match is not None:
        start, pos = match.start(), match.end()
        args = "{}"
        tail = raw[pos:].lstrip()
        if tail.startswith("{"):
            try:
                obj, used = json.JSONDecoder().raw_decode(tail)
                args = json.dumps(obj)
                pos = len(raw) - len(tail) + used
            except (ValueError, RecursionError):  # a client's input can nest past the parser
                pass
        end = raw.find("]", pos)
        if end != -1:
            tool = (match.group(1), args)
            rest = raw[:start] + raw[end + 1 :]
    rest, patches = _state_directives(rest)
    for m in _SIMPLE.finditer(rest):
        key, _, value = m.group(1).partition(":")
        found[key] = int(value) if value else True
    text = " ".join(_SIMPLE.sub("", rest).split())
    return Directives(
        text=text,
        tool=tool,
        state_patches=patches,
        ask=bool(found.get("ask")),
        fail=bool(found.get("fail")),
        continue_n=int(found.get("continue", 0)),
        sleep_ms=min(int(found.get("sleep", 0)), MAX_SLEEP_MS),
        words=min(int(found["words"]), MAX_WORDS) if "words" in found else None,
        pace_ms=min(int(found.get("pace", 0)), MAX_PACE_MS),
    )


def _state_directives(raw: str) -> tuple[str, tuple[str, ...]]:
    """`raw` without its `[state:[...]]` directives, and each one's update_state arguments.
    A directive whose patch is not a JSON array is left in the text."""
    patches: list[str] = []
    out: list[str] = []
    pos = 0
    for _ in range(100):  # bounded: at most 100 directives are read
        match = _STATE.search(raw, pos)
        if match is None:
            break
        tail = raw[match.end() :]
        try:
            value, used = json.JSONDecoder().raw_decode(tail)
        except (ValueError, RecursionError):
            value, used = None, 0
        end = match.end() + used
        if not isinstance(value, list) or raw[end : end + 1] != "]":
            out.append(raw[pos : match.end()])
            pos = match.end()
            continue
        patches.append(json.dumps({"patch": value}))
        out.append(raw[pos : match.start()])
        pos = end + 1
    out.append(raw[pos:])
    return "".join(out), tuple(patches)


def _latest_user_text(items: list[dict[str, Any]]) -> str:
    for item in reversed(items):
        if item.get("type") == "message" and item.get("role") == "user":
            return item_text(item)
    return ""


def _answered_tool(items: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(tool name, output) when the newest item is a tool output the model must answer."""
    if not items or items[-1].get("type") != "function_call_output":
        return None
    output = items[-1]
    for item in reversed(items):
        if item.get("type") == "function_call" and item.get("call_id") == output.get("call_id"):
            return item.get("name", "tool"), output.get("output", "")
    return "tool", output.get("output", "")


class ScriptedModel:
    """Offline and deterministic: the default model of the service and of its tests."""

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        d = parse_directives(_latest_user_text(request.items))
        if d.sleep_ms:
            await asyncio.sleep(d.sleep_ms / 1000)
        if d.fail:
            raise ModelError("the scripted model was told to fail ([fail])")
        answered = _answered_tool(request.items)
        if answered is not None:
            return await self._say(
                request, f"{answered[0]} returned: {answered[1]}", on_delta, d.pace_ms
            )
        if d.tool is not None or d.state_patches:
            calls = [
                ToolCallRequest(call_id=f"call_{uuid.uuid4().hex[:16]}", name=name, arguments=args)
                for name, args in (
                    *([d.tool] if d.tool is not None else []),
                    *((UPDATE_STATE, patch) for patch in d.state_patches),
                )
            ]
            return ModelResponse(
                text="",
                tool_calls=calls,
                usage=self._usage(request, ""),
                finish_reason="tool_calls",
            )
        if d.ask:
            return await self._say(
                request, "Could you tell me more about what you need?", on_delta, d.pace_ms
            )
        if d.continue_n:
            done = request.continuation_count
            if done < d.continue_n:
                response = await self._say(
                    request, f"part {done + 1} of {d.continue_n} ...", on_delta, d.pace_ms
                )
                response.needs_continuation = True
                response.finish_reason = "length"
                return response
            return await self._say(
                request, f"done after {d.continue_n} parts.", on_delta, d.pace_ms
            )
        if d.words is not None:
            text = " ".join(f"word{i + 1}" for i in range(d.words))
            return await self._say(request, text, on_delta, d.pace_ms)
        return await self._say(request, f"echo: {d.text}", on_delta, d.pace_ms)

    async def _say(
        self, request: ModelRequest, text: str, on_delta: OnDelta, pace_ms: int = 0
    ) -> ModelResponse:
        words = text.split(" ")
        for i, word in enumerate(words):
            if pace_ms and i:
                await asyncio.sleep(pace_ms / 1000)
            on_delta({"type": "delta", "text": word if i == 0 else " " + word})
            if i % 50 == 49:
                await asyncio.sleep(0)  # let subscribers drain long answers
        return ModelResponse(text=text, usage=self._usage(request, text))

    def _usage(self, request: ModelRequest, text: str) -> dict[str, int]:
        items = request.items_tokens
        if items is None:
            items = estimate_tokens(request.items)
        prompt = items + len(request.instructions or "") // 4
        output = len(text) // 4 + 1
        return {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}
