"""Issue #18: a browser app on another origin uses the service through the TypeScript
client's browser build, in Chromium.

The page is served from a second loopback port (another origin); the API allows exactly that
origin (ASR_CORS_ORIGINS). The page creates a session, runs it in stream mode (the run's own
event stream, read with fetch streaming) and follows the session's timeline with EventSource
and a stream token. An API on which the origin is not allowed refuses the same page.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, Page, start_ui_server, stop_and_check
from tests.conftest import ROOT, Server, TenantKey, free_port

try:
    from playwright.async_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) these tests
    expect = None  # type: ignore[assignment]

BUNDLE = ROOT / "clients" / "typescript" / "dist" / "browser" / "asr-client.js"
PAGE = Path(__file__).parent / "cross_origin"


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not BUNDLE.is_file():
        reason = "no browser build of the TypeScript client (npm ci && npm run build)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: .ci/run builds it before the tests", pytrace=False)
        pytest.skip(reason)
    return BUNDLE


@contextmanager
def serve_static(files: dict[str, tuple[Path, str]]) -> Iterator[str]:
    """A static file server on its own loopback port (another origin): path -> file, type."""

    class Static(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = files.get(self.path.split("?")[0])
            if found is None:
                self.send_error(404)
                return
            body = found[0].read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", found[1])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Static)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def frontend(bundle: Path) -> Iterator[str]:
    """The page, its script and the bundle, served from another origin."""
    files = {
        "/": (PAGE / "index.html", "text/html; charset=utf-8"),
        "/app.js": (PAGE / "app.js", "text/javascript; charset=utf-8"),
        "/asr-client.js": (bundle, "text/javascript; charset=utf-8"),
    }
    with serve_static(files) as url:
        yield url


@pytest.fixture(scope="module")
def cors_server(
    database_url: str, frontend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("cors") / "api.log"
    srv = start_ui_server(database_url, log, ASR_CORS_ORIGINS=frontend)
    yield srv
    stop_and_check(srv)


async def run_page(ui: Page, frontend: str, api: Server, tenant: TenantKey) -> Any:
    page = ui.page
    await page.goto(f"{frontend}/#api={api.base_url}&key={tenant.key}")
    await expect(page.locator("#status")).not_to_have_text("starting", timeout=30_000)
    return await page.evaluate(
        "() => { const r = {...window.__result}; delete r.handle; return r; }"
    )


async def test_a_page_on_another_origin_streams_a_run_and_follows_the_timeline(
    ui: Page, frontend: str, cors_server: Server, tenant: TenantKey
) -> None:
    result = await run_page(ui, frontend, cors_server, tenant)
    page = ui.page
    assert result["error"] is None, result["error"]
    await expect(page.locator("#status")).to_have_text("done")
    assert "".join(result["deltas"]) == "word1 word2 word3 word4 word5"
    run_types = [t for _, t in result["runFrames"]]
    assert run_types[0] == "RUN_STARTED" and run_types[-1] == "RUN_FINISHED"
    seqs = [seq for seq, _ in result["timeline"]]
    assert seqs == list(range(1, len(seqs) + 1))  # the whole ledger, in order, once
    assert result["timeline"][-1][1] == "RUN_FINISHED"
    assert [s for s, _ in result["runFrames"]] == seqs[1:]
    assert result["states"][:2] == ["connecting", "live"]
    # EventSource went to the API with a stream token, never with the key.
    streams = [u for u in ui.watch.urls if "/events/stream" in u]
    assert streams and all("token=" in u and tenant.key not in u for u in streams)
    assert all(u.startswith(cors_server.base_url) for u in streams)
    assert not frontend.startswith(cors_server.base_url)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "cross-origin.png"))


async def test_an_origin_that_is_not_allowed_is_refused(
    ui: Page, frontend: str, ui_server: Server, tenant: TenantKey
) -> None:
    """The same page against an API that lists no origin: the browser blocks the calls."""
    result = await run_page(ui, frontend, ui_server, tenant)
    assert result["error"] is not None and "ConnectionError" in result["error"]
    assert result["timeline"] == []
    # The browser reported the CORS refusals on the console; that is the expected outcome.
    ui.watch.console[:] = [m for m in ui.watch.console if "CORS" not in m and "Failed" not in m]
