"""Issue #18: /docs renders in Chromium with the network cut off.

Every request that is not for the service itself is aborted (as on a machine without
Internet access), and the page must still draw Swagger UI with the API's operations. A
screenshot is kept in artifacts/ for a person to look at.
"""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import ARTIFACTS, Page
from tests.conftest import Server

try:
    from playwright.async_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) these tests
    expect = None  # type: ignore[assignment]

# How long a docs page may take to draw itself from the document (a wait, not a judgement).
RENDER_TIMEOUT_MS = 30_000


async def cut_network(page: Any, server: Server) -> list[str]:
    """Abort every request that leaves the service; return the list of what was tried."""
    refused: list[str] = []

    async def route(route: Any) -> None:
        url = route.request.url
        if url.startswith(server.base_url + "/") or url.startswith("data:"):
            await route.continue_()
        else:
            refused.append(url)
            await route.abort("internetdisconnected")

    await page.context.route("**/*", route)
    return refused


async def test_swagger_ui_renders_offline(ui: Page, ui_server: Server) -> None:
    page = ui.page
    refused = await cut_network(page, ui_server)
    await page.goto(ui_server.base_url + "/docs")
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "Agent Session Runtime", timeout=RENDER_TIMEOUT_MS
    )
    operations = page.locator(".swagger-ui .opblock")
    await expect(operations.first).to_be_visible()
    assert await operations.count() > 30
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "docs-offline.png"), full_page=False)
    assert refused == []


async def test_redoc_renders_offline(ui: Page, ui_server: Server) -> None:
    """ReDoc draws itself from this service alone: its maker's CDN logo is served as an
    empty `data:` image, so the page makes no request elsewhere and logs no CSP refusal."""
    page = ui.page
    refused = await cut_network(page, ui_server)
    await page.goto(ui_server.base_url + "/redoc")
    # ReDoc parses the whole document in the page before it draws anything: on a busy
    # 2-core machine that alone has taken longer than the default wait.
    await expect(page.locator(".api-info h1")).to_contain_text(
        "Agent Session Runtime", timeout=RENDER_TIMEOUT_MS
    )
    await expect(page.locator("text=Create a session").first).to_be_attached()
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "redoc-offline.png"), full_page=False)
    assert refused == []
    assert not [m for m in ui.watch.console if "cdn.redoc.ly" in m]


async def test_the_root_page_links_to_docs_and_ui(ui: Page, ui_server: Server) -> None:
    page = ui.page
    await page.goto(ui_server.base_url + "/")
    await page.click("text=API reference (Swagger UI)")
    await expect(page).to_have_url(ui_server.base_url + "/docs")
