"""Issue #18: /docs and /redoc work offline (their assets are served by the service, from a
package, never a CDN), and GET / leads to the docs and the web page."""

from __future__ import annotations

import re

import httpx
import pytest

from app.api.openapi.docs import ASSETS


def external_urls(html: str) -> list[str]:
    return [u for u in re.findall(r"""(?:src|href)=["']([^"']+)""", html) if "//" in u]


@pytest.mark.parametrize(
    ("path", "script"), [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc")]
)
async def test_doc_pages_load_only_from_this_origin(
    anon: httpx.AsyncClient, path: str, script: str
) -> None:
    response = await anon.get(path)
    assert response.status_code == 200
    html = response.text
    assert f"/docs/assets/{script}" in html
    assert external_urls(html) == []
    assert "cdn" not in html and "googleapis" not in html
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp


@pytest.mark.parametrize("name", sorted(ASSETS))
async def test_assets_are_served_from_the_package(anon: httpx.AsyncClient, name: str) -> None:
    response = await anon.get(f"/docs/assets/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(ASSETS[name].split(";")[0])
    assert len(response.content) > 1000


async def test_an_unknown_asset_is_a_problem_404(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/docs/assets/..%2F..%2Fsettings.py")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


async def test_the_root_leads_to_docs_and_the_web_page(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    for link in ('href="/docs"', 'href="/redoc"', 'href="/ui"', 'href="/openapi.json"'):
        assert link in response.text


async def test_doc_routes_stay_out_of_the_api_contract(anon: httpx.AsyncClient) -> None:
    paths = (await anon.get("/openapi.json")).json()["paths"]
    assert not {"/", "/docs", "/redoc"} & set(paths)
    assert not [p for p in paths if p.startswith("/docs/")]
