"""Issue #22: a chat page built on `@ag-ui/client` (the official AG-UI client, bundled with
esbuild) talks to a session through `POST /v1/ag-ui`, in Chromium, from another origin.

The page is served from a second loopback port; the API allows exactly that origin
(ASR_CORS_ORIGINS). Two messages typed into the page are two runs of one thread: the replies
stream into the page, the client's own event verification accepts both streams, and the
session's memory holds each message once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.conftest import ARTIFACTS, Page, start_ui_server, stop_and_check
from tests.browser.test_cross_origin import serve_static
from tests.conftest import ROOT, Server, TenantKey

try:
    from playwright.async_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) these tests
    expect = None  # type: ignore[assignment]

BUNDLE = ROOT / "clients" / "ag-ui-tests" / "dist" / "chat.js"
PAGE = Path(__file__).parent / "ag_ui"


@pytest.fixture(scope="module")
def chat_frontend() -> Iterator[str]:
    if not BUNDLE.is_file():
        reason = (
            "no bundle of the AG-UI chat page (cd clients/ag-ui-tests && npm ci && npm run bundle)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: .ci/run builds it before the tests", pytrace=False)
        pytest.skip(reason)
    files = {
        "/": (PAGE / "index.html", "text/html; charset=utf-8"),
        "/chat.js": (BUNDLE, "text/javascript; charset=utf-8"),
    }
    with serve_static(files) as url:
        yield url


@pytest.fixture(scope="module")
def ag_ui_server(
    database_url: str, chat_frontend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("ag-ui") / "api.log"
    srv = start_ui_server(database_url, log, ASR_CORS_ORIGINS=chat_frontend)
    yield srv
    stop_and_check(srv)


async def say(ui: Page, text: str, replies: int) -> None:
    await ui.page.fill("#input", text)
    await ui.page.click("#send")
    await expect(ui.page.locator("#status")).to_have_text(f"replied {replies}", timeout=30_000)


async def test_a_page_on_ag_ui_client_chats_with_a_session(
    ui: Page, chat_frontend: str, ag_ui_server: Server, tenant: TenantKey
) -> None:
    page = ui.page
    await page.goto(f"{chat_frontend}/#api={ag_ui_server.base_url}&key={tenant.key}")
    await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
    await say(ui, "[words:4]", 1)
    await say(ui, "hello there", 2)
    chat = await page.evaluate("() => window.__chat")
    assert chat["error"] is None, chat["error"]
    assert chat["replies"] == ["word1 word2 word3 word4", "echo: hello there"]
    assert chat["types"].count("RUN_STARTED") == 2 and chat["types"][-1] == "RUN_FINISHED"
    await expect(page.locator("li.assistant")).to_have_text(
        ["assistant: word1 word2 word3 word4", "assistant: echo: hello there"]
    )
    # The session behind the thread: each message once, though the page sent its whole
    # history with the second message.
    headers = tenant.headers
    async with httpx.AsyncClient(base_url=ag_ui_server.base_url, headers=headers) as api:
        memory = (await api.get(f"/v1/sessions/{chat['threadId']}/memory")).json()["items"]
    users = [i["content"] for i in memory if i.get("role") == "user"]
    assert users == ["[words:4]", "hello there"]
    assert all(u.startswith(ag_ui_server.base_url) for u in ui.watch.urls if "/v1/" in u)
    assert not chat_frontend.startswith(ag_ui_server.base_url)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "ag-ui-chat.png"))
