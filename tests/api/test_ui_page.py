"""The web page's files and headers, without a browser (tests/browser drives the page).

`/ui` and its assets carry a strict Content-Security-Policy; the HTML has no inline script,
style or event handler; the script never turns data into markup; the files are package data
(so a non-editable install serves them); the page knows every event type of the ledger.
"""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from html.parser import HTMLParser
from importlib import resources

import httpx

from app.ui import STATIC_FILES
from tests.conftest import ROOT

STATIC = resources.files("app.ui") / "static"


def _csp(response: httpx.Response) -> dict[str, list[str]]:
    policy = response.headers["content-security-policy"]
    directives = [d.strip().split() for d in policy.split(";") if d.strip()]
    return {d[0]: d[1:] for d in directives}


async def test_every_ui_response_has_a_strict_csp(anon: httpx.AsyncClient) -> None:
    for path in ["/ui", *(f"/ui/{name}" for name in STATIC_FILES)]:
        response = await anon.get(path)
        assert response.status_code == 200, path
        csp = _csp(response)
        assert csp["default-src"] == ["'self'"]
        assert csp["connect-src"] == ["'self'"]
        assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
        assert csp["object-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
        assert "unsafe-inline" not in response.headers["content-security-policy"]
        assert "unsafe-eval" not in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-type"].startswith(STATIC_FILES[path[4:] or "index.html"])


async def test_page_routes(anon: httpx.AsyncClient) -> None:
    page = await anon.get("/ui")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script src="/ui/app.js"' in page.text
    slash = await anon.get("/ui/")
    assert slash.status_code == 308 and slash.headers["location"] == "/ui"
    for missing in ["/ui/nope.js", "/ui/__init__.py", "/ui/..%2F__init__.py", "/ui/static"]:
        response = await anon.get(missing)
        assert response.status_code == 404, missing
        assert response.headers["content-type"] == "application/problem+json"
    schema = (await anon.get("/openapi.json")).json()
    assert not [p for p in schema["paths"] if p.startswith("/ui")]


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []
        self.style_tags = 0
        self.bad_attrs: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.bad_attrs.append(f"{tag} {name}")
            if value and value.strip().lower().startswith(("javascript:", "data:")):
                self.bad_attrs.append(f"{tag} {name}={value}")
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True
        if tag == "style":
            self.style_tags += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(data)


def test_html_has_no_inline_script_style_or_handler() -> None:
    markup = _Markup()
    markup.feed((STATIC / "index.html").read_text())
    assert markup.scripts == [{"src": "/ui/app.js", "defer": None}]
    assert markup.inline == []
    assert markup.style_tags == 0
    assert markup.bad_attrs == []


def test_script_never_makes_markup_from_strings() -> None:
    # The code, without its whole-line comments (which name what it never does).
    source = re.sub(r"^\s*//.*$", "", (STATIC / "app.js").read_text(), flags=re.M)
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        'setAttribute("style"',
        "srcdoc",
    ):
        assert sink not in source, sink
    # Timers take functions only (a string would be evaluated).
    assert not re.search(r"setTimeout\(\s*[\"'`]", source)


def test_no_secret_in_the_shipped_files() -> None:
    for name in STATIC_FILES:
        text = (STATIC / name).read_text()
        assert not re.search(r"asr_[A-Za-z0-9]{8,}", text), name
        assert "localStorage.setItem" not in text, name


def test_page_reads_the_event_types_from_the_server() -> None:
    """Issue #18: no hard-coded list of event types that a new type would leave behind; the
    page listens for what GET /v1/event-types names (the browser tests see it work)."""
    source = (STATIC / "app.js").read_text()
    assert '"/v1/event-types"' in source
    assert "source.addEventListener(type, onEvent)" in source
    assert "EVENT_TYPES" not in source
    assert not re.search(r'"SESSION_CREATED",\s*"SESSION_SAVED"', source)


def test_static_files_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["app.ui"]
    shipped = sorted(p.name for p in (ROOT / "app" / "ui" / "static").iterdir())
    assert shipped == sorted(STATIC_FILES)
    for name in shipped:
        assert any(fnmatch(f"static/{name}", pattern) for pattern in patterns), name
