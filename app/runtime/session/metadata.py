"""Session metadata: JSON merge patch (RFC 7386) and its size check."""

from __future__ import annotations

import json
from typing import Any

from app.runtime.errors import PayloadTooLarge


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: objects merge recursively, `null` deletes a key."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def check_metadata_size(metadata: dict[str, Any], *, limit: int) -> None:
    """Raises PayloadTooLarge when the encoded metadata exceeds `limit` bytes."""
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    if size > limit:
        raise PayloadTooLarge(f"metadata is {size} bytes; the limit is {limit}")
