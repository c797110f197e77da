"""Browser tests of the web page (`/ui`): Playwright's Python driver and Debian's Chromium.

The browser is `/usr/bin/chromium` (`apt-get install chromium`; `ASR_TEST_CHROMIUM` names
another binary); Playwright's own browser download is never used. Without the driver or the
browser these tests are skipped, except under CI=true, where that fails the run.

Every page is watched: an uncaught script error or a Content-Security-Policy violation
reported on the console fails the test that caused it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Server, start_server, stop_server

CHROMIUM = Path(os.environ.get("ASR_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "artifacts"
# The same signing key on every replica, so a stream token from one works on the others.
STREAM_SECRET = "browser-tests-stream-token-secret-0123456789"
UI_ENV = {
    "ASR_STREAM_TOKEN_SECRET": STREAM_SECRET,
    # Several processes on one database see each other's events by polling (and on
    # PostgreSQL, by NOTIFY first); short, so the cross-replica test stays fast on SQLite.
    "ASR_SSE_POLL_SECONDS": "0.2",
}
TIMEOUT_MS = 15_000


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tests cannot run under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium() -> Path:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.is_file():
        _unavailable(f"no browser at {CHROMIUM} (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture(scope="session")
async def browser(chromium: Path) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(chromium))
        yield launched
        await launched.close()


def start_ui_server(database_url: str, log_path: Path, **env: str) -> Server:
    return start_server(database_url, log_path, **{**UI_ENV, **env})


def stop_and_check(server: Server) -> None:
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()[-4000:]


@pytest.fixture(scope="module")
def ui_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_ui_server(database_url, tmp_path_factory.mktemp("ui") / "a.log")
    yield srv
    stop_and_check(srv)


@dataclass
class Watch:
    """What a page said on its console, and every URL it asked for."""

    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        csp = [m for m in self.console if "Content Security Policy" in m or "Refused to" in m]
        return [*self.errors, *csp]


@dataclass
class Page:
    page: Any
    watch: Watch


@pytest.fixture
async def ui(browser: Any) -> AsyncIterator[Page]:
    """A fresh browser context (its own sessionStorage) and page."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    watch = Watch()
    page.on("console", lambda message: watch.console.append(message.text))
    page.on("pageerror", lambda error: watch.errors.append(str(error)))
    page.on("request", lambda request: watch.urls.append(request.url))
    yield Page(page, watch)
    await context.close()
    assert not watch.problems(), watch.problems()
