"""Structured logs: one JSON object a line, with the request's ids attached.

Standard `logging` with a small formatter rather than a logging library: uvicorn, SQLAlchemy
and Alembic already log through `logging`, so one root handler turns all of them into the
same JSON lines with no adapter.

Request-scoped fields (request_id, tenant_id, session_id, run_id) live in a context variable
holding a small mutable dict: the access middleware creates it per request, and code deeper
in (the auth dependency, the runtime) adds to it with `bind(...)`; every record logged while
the request runs carries them. Payload contents are never logged at info level, and a
redacting filter masks anything shaped like an API key or a Bearer credential, as a last
line of defence against a careless log call.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import Context, ContextVar, copy_context
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("request_id", "tenant_id", "session_id", "run_id")
_context: ContextVar[dict[str, str] | None] = ContextVar("asr_log_context", default=None)

# `asr_<12 hex>_<secret>`: keep the public prefix, mask the secret. Bearer values likewise.
_KEY = re.compile(r"\b(asr_[0-9a-f]{12}_)[A-Za-z0-9_\-]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',]+")
_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")

# LogRecord attributes that are not user-supplied `extra=` fields.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's ANSI-coloured copy of msg
}


def redact(text: str) -> str:
    """Mask API key secrets, Bearer credentials and URL passwords in `text`."""
    text = _KEY.sub(r"\1***", text)
    text = _BEARER.sub(r"\1***", text)
    return _PASSWORD_IN_URL.sub(r"\1***@", text)


@contextmanager
def log_context(**fields: str) -> Iterator[dict[str, str]]:
    """A fresh request context for the duration of the block."""
    token = _context.set(dict(fields))
    try:
        yield _context.get() or {}
    finally:
        _context.reset(token)


def task_context(**fields: str) -> Context:
    """A context for a background task (`asyncio.create_task(..., context=...)`) whose log
    lines carry `fields`, and not the fields of the request that started it: the task
    outlives the request, and must not share (or mutate) the request's context dict."""
    context = copy_context()
    context.run(_context.set, dict(fields))
    return context


def bind(**fields: str | None) -> None:
    """Attach ids to the current request's log context (no-op outside a request)."""
    current = _context.get()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v is not None})


def current_context() -> dict[str, str]:
    return dict(_context.get() or {})


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, the context ids, extras, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(current_context())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str, separators=(",", ":")))


class TextFormatter(logging.Formatter):
    """For a terminal: the usual line, the context ids appended, secrets masked."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{k}={v}" for k, v in current_context().items())
        return redact(f"{line} [{ids}]" if ids else line)


def configure_logging(level: str, fmt: str = "json") -> None:
    """Route every logger (ours, uvicorn's, SQLAlchemy's) to stderr in one format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # uvicorn's own handlers would print plain text; let its records reach the root instead.
    # Its access log is replaced by ours (app.access), which knows the route and the tenant.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
