"""Memory items: the typed units of a session's conversation.

Items are validated with these pydantic models at the edges (HTTP bodies, restore objects)
and then kept as plain JSON dicts inside the state, so that folding a long ledger costs dict
copies and not model construction.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from app.runtime.errors import InvalidItems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    type: Literal["text"] = "text"
    text: str


class _MediaPart(_Strict):
    url: str | None = Field(default=None, max_length=8192)
    data: str | None = Field(default=None, description="Inline base64 content.")
    media_type: str = Field(max_length=255)

    @model_validator(mode="after")
    def _one_source(self) -> _MediaPart:
        if (self.url is None) == (self.data is None):
            raise ValueError("give exactly one of url or data")
        if self.url is not None and not self.url.startswith(("http://", "https://", "data:")):
            raise ValueError("url must be http(s) or a data: URL")
        return self


class ImagePart(_MediaPart):
    type: Literal["image"] = "image"


class FilePart(_MediaPart):
    type: Literal["file"] = "file"
    filename: str | None = Field(default=None, max_length=255)


ContentPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentPart]
    # A client's own message id (AG-UI sends its whole history on every call): kept so a
    # resent message is recognised by id and never appended twice. Absent on older items.
    id: str | None = Field(default=None, min_length=1, max_length=128)


class FunctionCallItem(_Strict):
    type: Literal["function_call"] = "function_call"
    call_id: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=128)
    arguments: str = Field(default="{}", description="JSON-encoded arguments.")


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"] = "function_call_output"
    call_id: str = Field(min_length=1, max_length=128)
    output: str


def tool_output_item(call_id: str, output: str) -> dict[str, Any]:
    """The memory item answering tool call `call_id`: built here only, so every writer of a
    tool's output (a run, a client, an interrupted call) stores the same shape."""
    return {"type": "function_call_output", "call_id": call_id, "output": output}


MemoryItem = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem, Field(discriminator="type")
]
_items_adapter: TypeAdapter[list[MemoryItem]] = TypeAdapter(list[MemoryItem])


def normalize_items(raw: list[Any], *, max_inline_bytes: int) -> list[dict[str, Any]]:
    """Validate items and return them as canonical JSON dicts (defaults filled, None dropped).

    Raises:
        InvalidItems: an item does not validate, or an inline attachment is too large.
    """
    try:
        models = _items_adapter.validate_python(raw)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        raise InvalidItems(str(exc)) from exc
    items = [m.model_dump(mode="json", exclude_none=True) for m in models]
    for item in items:
        _check_inline_sizes(item, max_inline_bytes)
    return items


def _check_inline_sizes(item: dict[str, Any], limit: int) -> None:
    content = item.get("content")
    if not isinstance(content, list):
        return
    for part in content:
        data = part.get("data")
        if data is None:
            continue
        try:
            size = len(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise InvalidItems("inline attachment is not valid base64") from exc
        if size > limit:
            raise InvalidItems(f"inline attachment of {size} bytes exceeds the {limit}-byte limit")


def item_text(item: dict[str, Any]) -> str:
    """The text an item contributes to a prompt (used for token estimates and summaries)."""
    kind = item.get("type")
    if kind == "message":
        content = item["content"]
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    if kind == "function_call":
        return f"{item['name']}({item.get('arguments', '')})"
    if kind == "function_call_output":
        output: str = item.get("output", "")
        return output
    return ""


def estimate_tokens(items: list[dict[str, Any]], summary: str | None = None) -> int:
    """A cheap, download-free token estimate: about four characters a token, plus framing."""
    return tokens_for(sum(map(len, map(item_text, items))), len(items), summary)


def tokens_for(chars: int, count: int, summary: str | None = None) -> int:
    """`estimate_tokens` of `count` items whose `item_text` is `chars` characters long in
    all: for a caller that sums the characters itself (one suffix after another)."""
    return (chars + len(summary or "")) // 4 + 4 * count
