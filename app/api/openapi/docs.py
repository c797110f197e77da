"""The API's documentation pages, served with their assets by the service itself.

Swagger UI (`/docs`) and ReDoc (`/redoc`) usually load their JavaScript and CSS from a CDN,
which leaves a blank page wherever the service runs without Internet access. Here the files
come from the `fastapi-offline` package (a PyPI package that ships the Swagger UI and ReDoc
bundles) and are served from `/docs/assets/` out of a fixed list; each page's
Content-Security-Policy allows this origin only, so nothing can reach for a CDN. `GET /` is a
small page that leads to the docs, the web page (`/ui`) and the OpenAPI document.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

from app.runtime.errors import NotFound

__all__ = ["ASSETS", "DOCS_CSP", "router"]

ASSET_PACKAGE = "fastapi_offline"
ASSET_PREFIX = "/docs/assets/"
# name -> media type; nothing outside this list is served.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
# Swagger UI starts itself from an inline script and both tools inline styles; ReDoc runs
# its search in a worker made from a blob. Everything else: this origin only.
DOCS_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
_PAGE_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_ASSET_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "public, max-age=86400"}
TITLE = "Agent Session Runtime"

router = APIRouter(include_in_schema=False)


# ReDoc's bundle draws its maker's logo from their CDN: served with an empty image in its
# place (a `data:` URL, which the pages' CSP allows), the page asks nothing of any other host.
_REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_EMPTY_IMAGE = b"data:image/svg+xml,%3Csvg%20xmlns=%22http://www.w3.org/2000/svg%22/%3E"


@cache
def _asset(name: str) -> bytes:
    body = (resources.files(ASSET_PACKAGE) / "static" / name).read_bytes()
    return body.replace(_REDOC_LOGO, _EMPTY_IMAGE) if name == "redoc.standalone.js" else body


def _page(response: Response) -> Response:
    response.headers.update(_PAGE_HEADERS)
    return response


@router.get("/docs")
async def swagger_ui(request: Request) -> Response:
    return _page(
        get_swagger_ui_html(
            openapi_url=request.app.openapi_url,
            title=f"{TITLE} - Swagger UI",
            swagger_js_url=ASSET_PREFIX + "swagger-ui-bundle.js",
            swagger_css_url=ASSET_PREFIX + "swagger-ui.css",
            swagger_favicon_url=ASSET_PREFIX + "favicon.png",
            # No badge from the public validator service: the page must not call out.
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
        )
    )


@router.get("/redoc")
async def redoc(request: Request) -> Response:
    return _page(
        get_redoc_html(
            openapi_url=request.app.openapi_url,
            title=f"{TITLE} - ReDoc",
            redoc_js_url=ASSET_PREFIX + "redoc.standalone.js",
            redoc_favicon_url=ASSET_PREFIX + "favicon.png",
            with_google_fonts=False,
        )
    )


@router.get(ASSET_PREFIX + "{name}")
async def docs_asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no such documentation asset: {name!r}")
    return Response(_asset(name), media_type=media_type, headers=_ASSET_HEADERS)


LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Agent Session Runtime</title>
<link rel="icon" href="/docs/assets/favicon.png"></head>
<body>
<h1>Agent Session Runtime</h1>
<p>Durable, forkable LLM-agent sessions on an append-only event ledger, over HTTP and
Server-Sent Events.</p>
<ul>
<li><a href="/docs">API reference (Swagger UI)</a>: try the routes with an API key</li>
<li><a href="/redoc">API reference (ReDoc)</a></li>
<li><a href="/ui">Web page</a>: sessions, live timelines and runs</li>
<li><a href="/openapi.json">OpenAPI document</a></li>
<li><a href="/healthz">Health</a> and <a href="/readyz">readiness</a></li>
</ul>
</body></html>
"""
_LANDING_CSP = "default-src 'none'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'"


@router.get("/")
async def landing() -> Response:
    """A human landing on the service's address finds the docs and the web page."""
    headers = {**_PAGE_HEADERS, "Content-Security-Policy": _LANDING_CSP}
    return Response(LANDING, media_type="text/html; charset=utf-8", headers=headers)
