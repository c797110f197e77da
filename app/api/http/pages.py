"""Keyset pages of the list routes: an opaque cursor naming the last row of a page (its
time and key), and the cut of one page from the page + 1 rows a route reads."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from app.runtime.errors import InvalidRequest

T = TypeVar("T")


def encode_cursor(moment: datetime, key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([moment.isoformat(), key]).encode()).decode()


def decode_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    """The (time, key) a cursor names; None without a cursor; 422 for one we never issued."""
    if not cursor:
        return None
    try:
        moment, key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return datetime.fromisoformat(moment), str(key)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidRequest("cursor is not one this service issued") from exc


def cut(
    rows: list[T], page: int, position: Callable[[T], tuple[datetime, str]]
) -> tuple[list[T], str | None]:
    """The first `page` of `rows` (read with limit page + 1), and the next page's cursor if
    there is a next page."""
    if len(rows) <= page:
        return rows, None
    rows = rows[:page]
    return rows, encode_cursor(*position(rows[-1]))
