"""Secret redaction: the one filter every persisted string passes through (it also replaces
NUL characters, which PostgreSQL cannot store in text or JSONB).

Strings that look like credentials (provider API keys, bearer tokens, cloud keys, private
keys, our own API keys, `key=value` secrets) are replaced by a marker before an event or a
snapshot is written, and before a delta frame is sent. Redaction is per string and
idempotent, so folding redacted events gives the redacted fold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MARKER = "[REDACTED]"

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{12,}",
    r"\bgh[pousr]_[A-Za-z0-9]{16,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bAKIA[0-9A-Z]{12,}",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
    r"\bAIza[0-9A-Za-z_\-]{30,}",
    r"\basr_[0-9a-f]{12}_[A-Za-z0-9_\-]{16,}",
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{8,}=*",
    r"(?i)(?<![A-Za-z0-9])((?:api[_-]?key|secret|password|passwd|access[_-]?token|auth[_-]?token)"
    r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{4,}",
)


class Redactor:
    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        self._patterns = [re.compile(p) for p in (*DEFAULT_PATTERNS, *extra_patterns)]

    def text(self, value: str) -> str:
        # NUL cannot be stored in PostgreSQL text or JSONB; it never carries meaning here.
        value = value.replace("\x00", "\ufffd")
        for pattern in self._patterns:
            if pattern.groups:
                value = pattern.sub(lambda m: m.group(1) + MARKER, value)
            else:
                value = pattern.sub(MARKER, value)
        return value

    def value(self, value: Any) -> Any:
        """Redact every string inside a JSON value (keys included), returning a new value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value
