"""The web page at `/ui`: static HTML, CSS and JavaScript shipped in the package.

No build step and no template: the files in `static/` are served as they are, from a fixed
list (no path from the request ever reaches the file system). The page holds no secret: the
API key is pasted into it and kept in the browser's sessionStorage; live timelines open with
a short-lived stream token (`POST /v1/stream-tokens`), never with the key in a URL.

Every `/ui` response carries a strict Content-Security-Policy: only this origin's scripts,
styles, images and connections, no inline script or style, no framing.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from app.runtime.errors import NotFound

__all__ = ["CONTENT_SECURITY_POLICY", "STATIC_FILES", "router"]

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)

# name -> media type; nothing outside this list is served.
STATIC_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@cache
def _read(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def _file(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        raise NotFound(f"no such file of the web page: {name!r}")
    return Response(_read(name), media_type=media_type, headers=_HEADERS)


@router.get("/ui")
async def ui_page() -> Response:
    return _file("index.html")


@router.get("/ui/")
async def ui_slash() -> Response:
    return RedirectResponse("/ui", status_code=308, headers=_HEADERS)


@router.get("/ui/{name}")
async def ui_asset(name: str) -> Response:
    return _file(name)
