"""What the fake providers answer: one script, spoken in each provider's wire format.

The fakes (tests/fake_anthropic.py, tests/fake_gemini.py, and the error paths of
tests/fake_openai.py) decide from the conversation they are sent, in this order:
- a wrong key                           -> 401 in the provider's error shape
- the latest user text has `[auth]`     -> 401 as well (a key the provider revoked)
- the prompt is over CONTEXT_LIMIT chars -> the provider's context-length refusal (400)
- `[429:N]` in the latest user text     -> 429 for the first N requests carrying that text,
                                           with the hint `[hint:S]` (seconds, default 0.01)
- the last message is a tool result     -> "The tool said: <output>"
- `[call:NAME {json}]` and NAME offered -> a tool call of NAME with those arguments
- otherwise                             -> "<provider> echo: <latest user text>"
Reported input tokens are the prompt's characters / 3, so the 4-characters estimate has
something to learn.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CONTEXT_LIMIT = 3000
_CALL = re.compile(r"\[call:([A-Za-z_][\w-]*)\s*(\{.*?\})?\]", re.DOTALL)
_RATE = re.compile(r"\[429:(\d+)\]")
_HINT = re.compile(r"\[hint:([\d.]+)\]")


@dataclass(frozen=True)
class Answer:
    kind: str  # text | tool | error
    text: str = ""
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    error: str = ""  # auth | rate | context
    retry_after: float = 0.0


@dataclass
class Script:
    """The decision, and the requests seen per rate-limited text (thread-safe)."""

    provider: str
    seen: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(
        self, *, user: str, tool_output: str | None, tools: list[str], prompt_chars: int
    ) -> Answer:
        if "[auth]" in user:
            return Answer("error", status=401, error="auth")
        if prompt_chars > CONTEXT_LIMIT:
            return Answer("error", status=400, error="context")
        rate = _RATE.search(user)
        if rate is not None:
            with self.lock:
                self.seen[user] += 1
                count = self.seen[user]
            if count <= int(rate.group(1)):
                hint = _HINT.search(user)
                wait = float(hint.group(1)) if hint else 0.01
                return Answer("error", status=429, error="rate", retry_after=wait)
        if tool_output is not None:
            return Answer("text", text=f"The tool said: {tool_output}")
        call = _CALL.search(user)
        if call is not None and call.group(1) in tools:
            arguments = json.loads(call.group(2) or "{}")
            return Answer("tool", tool=call.group(1), arguments=arguments)
        clean = " ".join(_RATE.sub("", _HINT.sub("", user)).split())
        return Answer("text", text=f"{self.provider} echo: {clean}")


def input_tokens(prompt_chars: int) -> int:
    return max(1, prompt_chars // 3)


def thirds(text: str) -> list[str]:
    """The text in three chunks (so a stream has several deltas)."""
    third = max(1, len(text) // 3)
    return [text[:third], text[third : 2 * third], text[2 * third :]]
