"""The document's `webhooks` section (OpenAPI 3.1): what a subscriber's URL receives.

A subscription chooses event types, so each event type is a delivery kind of its own: a
signed `POST` whose body is Standard Webhooks' envelope `{type, timestamp, data}`, `data`
being the event as `GET .../events` shows it, without the tenant-wide `position` (which
`app.runtime.webhooks.delivery.delivery_body` does not send). Generated from the event union,
so a new event type is documented the day it exists.
"""

from __future__ import annotations

import copy
from typing import Any

from app.api.openapi.examples import DELIVERY_PAYLOADS, EVENT, RUN_ID

SIGNATURE_HEADERS = (
    (
        "webhook-id",
        "The event id: the same on every retry of a delivery; deduplicate on it.",
        "evt_01HZX3J8Q3V2C7A",
    ),
    (
        "webhook-timestamp",
        "Unix seconds of this attempt; refuse old ones to stop replays.",
        "1777636801",
    ),
    (
        "webhook-signature",
        '`v1,` + base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}" under the '
        "subscription's secret (without its `whsec_` prefix, base64-decoded).",
        "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    ),
)

DELIVERY_DESCRIPTION = """Sent to every active subscription whose `event_types` include this
type (or `*`), whose `session_id` and `metadata_filter`, if set, match the event's session.

Verify the signature with any Standard Webhooks library before trusting the body. Deliveries
are at least once and in order per session: answer any 2xx within the timeout to acknowledge;
anything else (another status, a timeout, a redirect) is retried with exponential backoff and
jitter, and a later event of the same session waits for this one. When the retry window runs
out the subscription is disabled (`deliveries_failing`)."""


def _camel(event_type: str) -> str:
    return "".join(part.capitalize() for part in event_type.split("_"))


def _delivery_schema(event_type: str, event_schema: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(event_schema)
    data["properties"].pop("position", None)
    data["required"] = [name for name in data.get("required", []) if name != "position"]
    data["title"] = f"{_camel(event_type)}Data"
    data["description"] = f"The {event_type} event, as the events API shows it."
    return {
        "type": "object",
        "title": f"{_camel(event_type)}Delivery",
        "description": f"The body of a {event_type} delivery (Standard Webhooks envelope).",
        "properties": {
            "type": {"type": "string", "const": event_type},
            "timestamp": {
                "type": "string",
                "format": "date-time",
                "description": "When the event was committed (the event's `created_at`).",
            },
            "data": data,
        },
        "required": ["type", "timestamp", "data"],
    }


def _example(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    data = {key: value for key, value in EVENT.items() if key != "position"}
    data.update(type=event_type, payload=payload, run_id=RUN_ID, turn_id="turn_1", seq=11)
    return {"type": event_type, "timestamp": data["created_at"], "data": data}


def describe_webhooks(document: dict[str, Any]) -> None:
    """One webhook per event type, with its body schema as a component."""
    schemas = document["components"]["schemas"]
    union = schemas.get("EventList", {}).get("properties", {}).get("data", {}).get("items", {})
    mapping: dict[str, str] = union.get("discriminator", {}).get("mapping", {})
    webhooks: dict[str, Any] = {}
    for event_type, ref in sorted(mapping.items()):
        name = f"{_camel(event_type)}Delivery"
        schemas[name] = _delivery_schema(event_type, schemas[ref.rsplit("/", 1)[-1]])
        body: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{name}"}}
        if event_type in DELIVERY_PAYLOADS:
            body["example"] = _example(event_type, DELIVERY_PAYLOADS[event_type])
        webhooks[event_type] = {
            "post": {
                "operationId": f"deliver{_camel(event_type)}",
                "summary": f"A {event_type} event, delivered",
                "description": DELIVERY_DESCRIPTION,
                "tags": ["webhooks"],
                "parameters": [
                    {
                        "name": header,
                        "in": "header",
                        "required": True,
                        "description": text,
                        "schema": {"type": "string"},
                        "example": example,
                    }
                    for header, text, example in SIGNATURE_HEADERS
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": body},
                },
                "responses": {
                    "2XX": {"description": "Received: the delivery is done."},
                    "default": {"description": "Not received: the delivery is retried."},
                },
            }
        }
    document["webhooks"] = webhooks
