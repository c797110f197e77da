"""The A2A routes in our OpenAPI document: the JSON-RPC envelope from the SDK's own
protobuf-derived schema, its components renamed `A2a…` (the protocol has its own `Message`,
`Task`, `Part`, … which must neither replace ours nor rename them), with examples."""

from __future__ import annotations

from typing import Any

from a2a.server.routes._jsonrpc_schema import envelope_schema

PREFIX = "A2a"
PATHS = ("/a2a", "/.well-known/agent-card.json")
REQUEST_SCHEMA = f"{PREFIX}A2ARequest"

SEND_EXAMPLE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {
        "message": {
            "messageId": "m-1",
            "role": "ROLE_USER",
            "parts": [{"text": "hello"}],
        }
    },
}
APPROVE_EXAMPLE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "SendMessage",
    "params": {
        "message": {
            "messageId": "m-2",
            "taskId": "run_01HZX3J8Q3V2C7",
            "role": "ROLE_USER",
            "parts": [{"data": {"approve": True}}],
        }
    },
}
TASK_EXAMPLE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "task": {
            "id": "run_01HZX3J8Q3V2C7",
            "contextId": "demo",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [
                {
                    "artifactId": "answer-run_01HZX3J8Q3V2C7",
                    "name": "answer",
                    "parts": [{"text": "echo: hello"}],
                }
            ],
        }
    },
}
STREAM_EXAMPLE = (
    'data: {"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "run_01HZX3J8Q3V2C7", '
    '"contextId": "demo", "status": {"state": "TASK_STATE_SUBMITTED"}}}}\n\n'
    'data: {"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": '
    '"run_01HZX3J8Q3V2C7", "contextId": "demo", "status": {"state": '
    '"TASK_STATE_COMPLETED"}}}}\n\n'
)
STREAM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "SendStreamingMessage and SubscribeToTask: Server-Sent Events whose `data:` "
    "is one A2A JSON-RPC response each (its result a Task, a status update or an artifact "
    "update; an error ends the stream).",
}
ERROR_EXAMPLE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 3,
    "error": {"code": -32001, "message": "no task run_unknown"},
}
CARD_EXAMPLE: dict[str, Any] = {
    "name": "Agent Session Runtime",
    "description": "The default agent of this Agent Session Runtime.",
    "version": "0.1.0",
    "supportedInterfaces": [
        {
            "url": "https://asr.example.com/a2a",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
    ],
    "capabilities": {"streaming": True, "pushNotifications": True, "extendedAgentCard": True},
    "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
    "securityRequirements": [{"schemes": {"bearer": {}}}],
    "defaultInputModes": ["text/plain", "application/json"],
    "defaultOutputModes": ["text/plain", "application/json"],
    "skills": [
        {"id": "chat", "name": "Chat", "description": "Answers a message.", "tags": ["chat"]}
    ],
}

RPC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An A2A JSON-RPC 2.0 request (A2A spec 1.0; send `A2A-Version: 1.0`).",
        "content": {
            "application/json": {
                "schema": {"$ref": f"#/components/schemas/{REQUEST_SCHEMA}"},
                "example": SEND_EXAMPLE,
                "examples": {
                    "send": {"summary": "Send a message", "value": SEND_EXAMPLE},
                    "approve": {
                        "summary": "Approve what a task in INPUT_REQUIRED waits for",
                        "value": APPROVE_EXAMPLE,
                    },
                },
            }
        },
    }
}
RPC_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A JSON-RPC response: a result, or an A2A error such as -32001 (task "
        "not found). SendStreamingMessage and SubscribeToTask answer with Server-Sent Events "
        "(`text/event-stream`) instead, each `data:` one JSON-RPC response whose result is a "
        "Task, a status update or an artifact update.",
        "content": {
            "application/json": {
                "schema": {"type": "object"},
                "example": TASK_EXAMPLE,
                "examples": {
                    "task": {"summary": "A completed task", "value": TASK_EXAMPLE},
                    "error": {"summary": "An A2A error", "value": ERROR_EXAMPLE},
                },
            },
            "text/event-stream": {"schema": STREAM_SCHEMA, "example": STREAM_EXAMPLE},
        },
    }
}
# The operations' examples as `app.api.openapi.examples` gives them to the document.
RPC_OPERATION: dict[str, Any] = {
    "request": SEND_EXAMPLE,
    "responses": {200: TASK_EXAMPLE},
    "stream": STREAM_EXAMPLE,
    "stream_schema": STREAM_SCHEMA,
}
CARD_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "An A2A Agent Card",
        "content": {"application/json": {"schema": {"type": "object"}, "example": CARD_EXAMPLE}},
    }
}


def _renamed(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {k: _renamed(v, names) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            out["$ref"] = f"#/components/schemas/{names.get(name, name)}"
        return out
    if isinstance(node, list):
        return [_renamed(v, names) for v in node]
    return node


def a2a_components() -> dict[str, Any]:
    """The JSON-RPC envelope and every protocol message it uses, named `A2a<name>`."""
    components: dict[str, Any] = {}
    envelope_schema(components)
    names = {name: PREFIX + name for name in components}
    out = {names[name]: _renamed(body, names) for name, body in components.items()}
    # The methods' params overlap (a SendMessageRequest is also a valid empty
    # GetExtendedAgentCardRequest): `method` says which one applies, so any may match.
    params = out[REQUEST_SCHEMA]["properties"]["params"]
    params["anyOf"] = params.pop("oneOf")
    return out


def describe_a2a(document: dict[str, Any]) -> None:
    """Add the protocol's components to the document."""
    document.setdefault("components", {}).setdefault("schemas", {}).update(a2a_components())
