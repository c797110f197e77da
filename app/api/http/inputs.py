"""What every request's input is held to: the base of the request bodies (strict, unknown
fields refused, text that every backend can store, integral floats read as ints), the
session id pattern, the largest seq a request may name, and the `types` filter of the event
lists and streams."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, model_validator

from app.runtime.session.json_limits import check_json_value

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# The largest seq a request may name: any larger value cannot exist, and one past 2**63
# would not even fit the database's integer (SQLite raises OverflowError, a 500).
MAX_SEQ = 2**53 - 1


def check_storable_text(value: Any) -> None:
    """Refuse unpaired surrogates with a 422: text no backend can store as it was sent.

    They are valid JSON escapes, and SQLite keeps them, but they are not Unicode text:
    PostgreSQL refuses them in JSONB and text, so left alone they would fail at the database,
    as a 500, on one backend only. (NUL, the other such character, is stored as U+FFFD by the
    store's redaction funnel.)
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text may not contain unpaired surrogates") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def integral_numbers(value: Any) -> Any:
    """The body with every integral float (`378.0`) as an int (`378`).

    JSON has one number type: `378.0` and `378` are the same number, and JSON Schema's
    `integer` accepts both, so a field the schema calls an integer must too. Strict validation
    would refuse the float; this turns it into the int it equals first. Other floats stay
    floats (a fraction in an integer field is still a 422), and nothing else changes.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_numbers(item) for item in value]
    return value


class RequestBody(BaseModel):
    # strict: `0` is not `false` and `"1"` is not `1` -- a schema-violating body is a 422.
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        check_storable_text(data)
        # Raises the domain errors themselves (not ValueError), so they pass through pydantic
        # and answer with their own codes (json_too_deep, non_finite_number). The raw body was
        # scanned already; this catches what only parsing shows, such as 1e999 (infinity).
        check_json_value(data)
        return integral_numbers(data)


def split_types(values: list[str] | None) -> list[str] | None:
    """`types` may repeat and may hold comma-separated names."""
    if not values:
        return None
    out = [t.strip() for v in values for t in v.split(",") if t.strip()]
    return out or None


def _time_text(value: Any) -> Any:
    """A JSON string naming a time (RFC 3339) as the datetime it names; anything else as it
    is, for the strict check after it to refuse (a number is not a time)."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


# A point in time in a request body: an RFC 3339 string with its zone (422 without one).
TimeWithZone = Annotated[AwareDatetime, BeforeValidator(_time_text)]
