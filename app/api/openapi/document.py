"""The OpenAPI document as the contract: stable operation ids, examples, problem documents
and the Server-Sent Events frames, added to what FastAPI derives from the routes.

- Operation ids are the route functions' names in camelCase (`createSession`), with a few
  renamed for the reader (`compactSession`), so generated clients get readable names that do
  not change when a path does.
- Every operation has a summary (the route's), a description (its docstring) and examples
  (`app/api/openapi/examples.py`) for its request body and its answers.
- Every error answer is `application/problem+json` with the `Problem` schema and an example.
- Stream answers (`text/event-stream`) are described frame by frame, with the frame
  payloads as components (`StreamEndFrame`, `ShutdownFrame`, `DeltaFrame`, and the
  typed events themselves), and an example stream.

The document is built once per app and cached, like FastAPI's own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from app.api.a2a.schema import describe_a2a
from app.api.ag_ui.schema import describe_ag_ui
from app.api.http.problems import MEDIA_TYPE
from app.api.openapi.examples import OPERATIONS, PARAMETERS, problem_example
from app.api.openapi.tags import describe_tags
from app.api.openapi.webhooks import describe_webhooks

# Route function names that read badly as operation ids.
RENAMED = {
    "compact": "compact_session",
    "context": "get_context",
    "patch_session": "update_session",
    "post_tool_outputs": "submit_tool_outputs",
    "post_approval": "decide_approval",
    "create_oneshot_run": "run_once",
    "delegate": "delegate_task",
    "healthz": "get_health",
    "readyz": "get_readiness",
    "metrics": "get_metrics",
}
# FastAPI names two schemas of the same class name by their direction; say what they are.
SCHEMA_NAMES = {"RunLimits-Input": "RunLimits", "RunLimits-Output": "RunStartedLimits"}

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
SSE_DESCRIPTION = """Server-Sent Events, one frame per message:

- **ledger event**: `id` = the event's seq (on the tenant stream: an opaque cursor), `event` =
  its type, `data` = the event JSON (one of the `*Event` schemas, told apart by `type`);
- **delta** (no `id`): `event: delta`, `data` = a `DeltaFrame`, a piece of the model's text
  as it is written; never stored, only sent by the server that runs the model;
- **control** (no `id`): `event: overflow` or `event: shutdown` (`data` = a `StreamEndFrame`;
  a `shutdown` frame is also a `ShutdownFrame`) end the stream: reconnect with `Last-Event-ID`
  (after a run's own stream: follow the session's timeline after `resume_after`);
  `event: ERROR` (`data` = a `Problem`) ends it after a failure;
- `retry:` once at the start, and comment lines (`: ping`) as heartbeats.

Control frames never carry an id, so `Last-Event-ID` always names the last ledger event
received."""

FRAME_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServerSentEvent": {
        "type": "object",
        "description": "One frame of an event stream, as a client's SSE parser hands it over.",
        "properties": {
            "event": {
                "type": "string",
                "description": "An event type, `delta`, `overflow`, `shutdown` or `ERROR`.",
            },
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/EventList/properties/data/items"},
                        {"$ref": "#/components/schemas/DeltaFrame"},
                        {"$ref": "#/components/schemas/StreamEndFrame"},
                        {"$ref": "#/components/schemas/ShutdownFrame"},
                        {"$ref": "#/components/schemas/Problem"},
                    ]
                },
                "description": "JSON: an event (any of the `*Event` schemas, by `event`), a "
                "`DeltaFrame`, a `StreamEndFrame`, a `ShutdownFrame` or a `Problem`.",
            },
            "id": {
                "type": "string",
                "description": "A ledger event's seq (tenant stream: its cursor). Control "
                "frames and deltas carry none of their own.",
            },
            "retry": {"type": "integer", "description": "Reconnection delay (ms), sent once."},
        },
        "required": ["event", "data"],
    },
    "DeltaFrame": {
        "type": "object",
        "description": "A piece of the model's output as it is generated (not in the ledger).",
        "properties": {
            "type": {"type": "string", "description": "`delta`."},
            "run_id": {"type": "string"},
            "turn_id": {"type": "string"},
            "text": {"type": "string", "description": "The next piece of text."},
        },
        "required": ["type"],
        "additionalProperties": True,
    },
    "StreamEndFrame": {
        "type": "object",
        "description": "`overflow` or `shutdown` on a timeline: reconnect after `resume_after`.",
        "properties": {
            "resume_after": {"type": "string", "description": "Send as Last-Event-ID."},
            "detail": {"type": "string"},
        },
        "required": ["resume_after", "detail"],
    },
    "ShutdownFrame": {
        "type": "object",
        "description": "What a `shutdown` frame adds to its `StreamEndFrame`: the server "
        "stops; reconnect (to another replica) after `resume_after`. `last_seq` on a session's "
        "or run's stream (a run goes on, or is interrupted: follow the session's timeline).",
        "properties": {
            "reason": {"type": "string"},
            "reconnect": {"type": "boolean"},
            "last_seq": {"type": "integer"},
        },
        "required": ["reason", "reconnect"],
    },
}


def operation_id(route: APIRoute) -> str:
    """The route's operation id: its function name (or the rename), in camelCase."""
    name = RENAMED.get(route.name, route.name)
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def install_openapi(app: FastAPI, paths: list[str]) -> None:
    """Replace `app.openapi` with the contract builder (cached after the first call).
    `paths`: the order the document lists them in, whatever order the app matches them."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            found = document.get("paths", {})
            order = {path: i for i, path in enumerate(paths)}
            document["paths"] = dict(
                sorted(found.items(), key=lambda item: order.get(item[0], len(order)))
            )
            app.openapi_schema = contract(document)
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]


def contract(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document with names, examples, problems and stream frames filled in."""
    document = _renamed(document)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(FRAME_SCHEMAS)
    _describe_recovery_object(schemas)
    _describe_memory_items(schemas)
    describe_ag_ui(document)
    describe_a2a(document)
    names = {v: k for k, v in RENAMED.items()}
    for path, item in document["paths"].items():
        for operation in item.values():
            op_id = operation["operationId"]
            name = names.get(_snake(op_id), _snake(op_id))
            _describe(operation, path, OPERATIONS.get(name, {}))
    describe_tags(document)
    describe_webhooks(document)
    return document


# Union members are told apart by `type`: it has a default in the models, but a union member
# without it matches no member, so the document must call it required.
TAGGED = (
    "MessageItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "TextPart",
    "ImagePart",
    "FilePart",
)
BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _describe_memory_items(schemas: dict[str, Any]) -> None:
    """What the runtime's item models check beyond their fields: the tag, and for an image or
    file exactly one source, a URL (http, https or data:) or inline base64 data."""
    for name in TAGGED:
        schema = schemas.get(name)
        if schema is not None and "type" in schema.get("properties", {}):
            schema["required"] = sorted({*schema.get("required", []), "type"})
    for name in ("ImagePart", "FilePart"):
        schema = schemas.get(name)
        if schema is None:
            continue
        schema["oneOf"] = [
            {
                "required": ["url"],
                "properties": {
                    "url": {"type": "string", "pattern": "^(https?://|data:)"},
                    "data": {"type": "null"},
                },
            },
            {
                "required": ["data"],
                "properties": {
                    "data": {"type": "string", "pattern": BASE64},
                    "url": {"type": "null"},
                },
            },
        ]


def _describe_recovery_object(schemas: dict[str, Any]) -> None:
    """Say what `restore` accepts as `state`: a recovery object (as `GET .../state` returns
    it), of which the service reads `memory` (the same items as an append takes) and
    `max_items`, and keeps nothing else. The model takes any object and the runtime checks it;
    the document says which objects pass."""
    restore = schemas.get("RestoreRequest", {}).get("properties", {})
    items = schemas.get("ItemsAppend", {}).get("properties", {}).get("items", {}).get("items")
    if "state" not in restore or items is None:
        return
    restore["state"] = {
        "type": "object",
        "description": restore["state"].get("description", ""),
        "properties": {
            "memory": {
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": items},
                    "summary": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                },
            },
            "max_items": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        },
        "required": ["memory"],
        "additionalProperties": True,
    }


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _renamed(document: dict[str, Any]) -> dict[str, Any]:
    schemas = document.get("components", {}).get("schemas", {})
    for old, new in SCHEMA_NAMES.items():
        if old in schemas:
            schemas[new] = schemas.pop(old)
    text = json.dumps(document)
    for old, new in SCHEMA_NAMES.items():
        text = text.replace(f'"#/components/schemas/{old}"', f'"#/components/schemas/{new}"')
    return json.loads(text)


# Path and query text may not hold NUL (400 `invalid_characters`, before routing).
NO_NUL = "^[^\\u0000]*$"


def _no_nul(schema: dict[str, Any]) -> None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch.setdefault("pattern", NO_NUL)
        elif branch.get("type") == "array":
            _no_nul(branch.get("items", {}))


def _describe(operation: dict[str, Any], path: str, examples: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["name"] in PARAMETERS:
            parameter["example"] = PARAMETERS[parameter["name"]]
        if parameter["in"] in ("path", "query"):
            _no_nul(parameter.get("schema", {}))
    request = examples.get("request")
    for media, body in operation.get("requestBody", {}).get("content", {}).items():
        # JSON under its own media type too (a JSON Patch is `application/json-patch+json`).
        if request is not None and (media == "application/json" or media.endswith("+json")):
            body["example"] = request
    for status, response in operation.get("responses", {}).items():
        content = response.get("content", {})
        code = int(status) if str(status).isdigit() else 0
        if MEDIA_TYPE in content:
            content[MEDIA_TYPE]["example"] = problem_example(code, path)
            content.pop("application/json", None)
            continue
        if code in examples.get("responses", {}) and "application/json" in content:
            content["application/json"]["example"] = examples["responses"][code]
        if SSE in content:
            # AG-UI streams carry the protocol's frames, not ours: their examples say so.
            schema = examples.get("stream_schema") or {
                "$ref": "#/components/schemas/ServerSentEvent",
                "description": SSE_DESCRIPTION,
            }
            content[SSE] = {"schema": schema, "example": examples.get("stream", "")}
        if NDJSON in content and "ndjson" in examples:
            content[NDJSON]["example"] = examples["ndjson"]
        if "text" in examples and code == 200:
            for media in content.values():
                media["example"] = examples["text"]
