"""MkDocs hook: the reference pages generated from the code, at build time.

A page holds a marker (`<!-- generated:NAME -->`) and the build puts the text in its place:
`operations` from the OpenAPI document `create_app()` serves, `events` from the event
catalogue (`GET /v1/event-types`), `settings` from the `Settings` class, `cli` from the `asr`
argument parser. Generated, so the docs cannot drift from the code they describe.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for name, render in GENERATORS.items():
        marker = f"<!-- generated:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


def _operations() -> str:
    from app.main import create_app
    from app.settings import Settings

    spec = create_app(Settings(bootstrap_default_tenant=False)).openapi()
    by_tag: dict[str, list[str]] = {}
    for path, item in spec["paths"].items():
        for verb, op in item.items():
            tag = (op.get("tags") or ["other"])[0]
            statuses = ", ".join(str(s) for s in op["responses"])
            block = [
                f"### {op['summary']}",
                "",
                f"`{verb.upper()} {path}` · operation id `{op['operationId']}` · "
                f"answers {statuses}",
                "",
                op.get("description", ""),
                "",
            ]
            by_tag.setdefault(tag, []).extend(block)
    out: list[str] = []
    for tag, blocks in by_tag.items():
        out += [f"## {tag.capitalize()}", "", *blocks]
    return "\n".join(out)


def _type_of(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_type_of(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {_type_of(schema.get('items', {}))}"
    if "enum" in schema:
        return " / ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    return str(schema.get("type", "any"))


def _events() -> str:
    from app.runtime.session.event_catalogue import event_catalogue

    out: list[str] = []
    for info in event_catalogue():
        schema = info.payload_schema
        out += [f"## `{info.type}`", "", info.description, ""]
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            out += ["| payload key | type | required |", "| --- | --- | --- |"]
            for key, prop in properties.items():
                out.append(f"| `{key}` | {_type_of(prop)} | {'yes' if key in required else ''} |")
            out.append("")
        else:
            out += ["One of several payload shapes (see the JSON Schema below).", ""]
        out += [
            '??? note "Payload JSON Schema"',
            "",
            "    ```json",
            *("    " + line for line in json.dumps(schema, indent=2).splitlines()),
            "    ```",
            "",
        ]
    return "\n".join(out)


def _settings() -> str:
    from app.settings import Settings

    out = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "unset" if default is None else f"`{default}`" if default != "" else "empty"
        if hasattr(default, "get_secret_value"):
            shown = "empty"
        meaning = (field.description or "").replace("|", "\\|").replace("\n", " ")
        out.append(f"| `ASR_{name.upper()}` | {shown} | {meaning} |")
    return "\n".join(out)


def _cli() -> str:
    from app.cli import _parser

    parser = _parser()
    out: list[str] = []

    def render(command: str, p: argparse.ArgumentParser) -> None:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            p.print_help()
        out.extend([f"### `{command}`", "", "```text", buffer.getvalue().rstrip(), "```", ""])
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    render(f"{command} {name}", child)

    render("asr", parser)
    return "\n".join(out)


GENERATORS = {
    "operations": _operations,
    "events": _events,
    "settings": _settings,
    "cli": _cli,
}
