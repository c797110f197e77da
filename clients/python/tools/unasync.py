"""Generate the sync client (`asr_client/_sync.py`) from the async one (`_async.py`).

One source for both clients, so they cannot drift apart; only the transport calls differ.
Run it after editing `_async.py`:

    python clients/python/tools/unasync.py

A test (tests/clients/test_python_client_unit.py) fails when `_sync.py` is not what this
script makes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "asr_client"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"

# In order: the specific before the general.
REPLACEMENTS: list[tuple[str, str]] = [
    ('"""The async client:', '"""The sync client (generated; do not edit):'),
    ("The sync client (`_sync.py`) is generated from this file by tools/unasync.py: edit this one.",
     "Generated from `_async.py` by tools/unasync.py: edit that file, then run the script."),
    ("The service's HTTP and SSE API, awaitable.", "The service's HTTP and SSE API, blocking."),
    ("AsyncSessionClient", "SessionClient"),
    ("async def __aenter__", "def __enter__"),
    ("async def __aexit__", "def __exit__"),
    ("async def aclose", "def close"),
    ("await self.aclose()", "self.close()"),
    ("self._http.aclose()", "self._http.close()"),
    ("httpx.AsyncClient", "httpx.Client"),
    ("httpx.AsyncBaseTransport", "httpx.BaseTransport"),
    ("AsyncIterator", "Iterator"),
    ("aconnect_sse", "connect_sse"),
    ("aiter_sse", "iter_sse"),
    ("aiter_lines", "iter_lines"),
    ("aread()", "read()"),
    ("import asyncio", "import time"),
    ("asyncio.sleep", "time.sleep"),
    ("async with ", "with "),
    ("async for ", "for "),
    ("async def ", "def "),
    ("await ", ""),
    (", awaitable", ""),
]


def transform(text: str) -> str:
    """The sync module's text, from the async module's."""
    for old, new in REPLACEMENTS:
        text = text.replace(old, new)
    # A loop that only passes items on is `yield from` in a plain generator.
    text = re.sub(r"(\n[ ]*)for (\w+) in (.+):\n[ ]+yield \2\n", r"\1yield from \3\n", text)
    return re.sub(r"[ \t]+\n", "\n", text)


def main() -> int:
    TARGET.write_text(transform(SOURCE.read_text()))
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
