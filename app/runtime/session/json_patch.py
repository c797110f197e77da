"""JSON Patch (RFC 6902) over JSON Pointers (RFC 6901), exact and small.

Why our own: the session's shared state is edited by three writers (a frontend over AG-UI
or REST, and the model through a tool), and the ledger stores the patch each one sent. The
fold must apply a stored patch exactly as the write decided it, so the rules live here, in
one place, without a dependency whose edge cases (a `test` of `1` against `true`, the `-`
index, a `move` into its own child) could differ between releases.

`apply_patch` never edits its input: a failed patch leaves the document untouched, and a
successful one returns a new document that shares the unchanged parts with the old one.
"""

from __future__ import annotations

import copy
from typing import Any

from app.runtime.errors import InvalidPatch

_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
MAX_PATCH_OPS = 1000


def parse_pointer(pointer: Any) -> list[str]:
    """The reference tokens of a JSON Pointer (`""` is the whole document)."""
    if not isinstance(pointer, str):
        raise InvalidPatch("a path must be a string (a JSON Pointer)")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise InvalidPatch(f"path {pointer!r} must be empty or start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: `true` is not `1`, `1` is `1.0`, key order does not count."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _index(token: str, size: int, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return size
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise InvalidPatch(f"{token!r} is not an array index")
    index = int(token)
    if index > size or (index == size and not allow_end):
        raise InvalidPatch(f"array index {index} is out of range")
    return index


def _get(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise InvalidPatch(f"path member {token!r} does not exist")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(token, len(doc), allow_end=False)]
        else:
            raise InvalidPatch(f"path goes through a scalar at {token!r}")
    return doc


def _rebuilt(doc: Any, tokens: list[str], change: Any) -> Any:
    """`doc` with the container at `tokens[:-1]` replaced by `change(container, last)`,
    copying only the containers on the path."""
    if len(tokens) == 1:
        return change(doc, tokens[0])
    head, rest = tokens[0], tokens[1:]
    if isinstance(doc, dict):
        if head not in doc:
            raise InvalidPatch(f"path member {head!r} does not exist")
        return {**doc, head: _rebuilt(doc[head], rest, change)}
    if isinstance(doc, list):
        index = _index(head, len(doc), allow_end=False)
        out = list(doc)
        out[index] = _rebuilt(doc[index], rest, change)
        return out
    raise InvalidPatch(f"path goes through a scalar at {head!r}")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value

    def change(container: Any, last: str) -> Any:
        if isinstance(container, dict):
            return {**container, last: value}
        if isinstance(container, list):
            out = list(container)
            out.insert(_index(last, len(container), allow_end=True), value)
            return out
        raise InvalidPatch(f"cannot add {last!r} to a scalar")

    return _rebuilt(doc, tokens, change)


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise InvalidPatch("cannot remove the whole document")

    def change(container: Any, last: str) -> Any:
        if isinstance(container, dict):
            if last not in container:
                raise InvalidPatch(f"path member {last!r} does not exist")
            return {k: v for k, v in container.items() if k != last}
        if isinstance(container, list):
            out = list(container)
            del out[_index(last, len(container), allow_end=False)]
            return out
        raise InvalidPatch(f"cannot remove {last!r} from a scalar")

    return _rebuilt(doc, tokens, change)


def _replace(doc: Any, tokens: list[str], value: Any) -> Any:
    _get(doc, tokens)  # the target must exist
    if not tokens:
        return value

    def change(container: Any, last: str) -> Any:
        if isinstance(container, dict):
            return {**container, last: value}
        out = list(container)
        out[_index(last, len(container), allow_end=False)] = value
        return out

    return _rebuilt(doc, tokens, change)


def _operation(doc: Any, op: Any, number: int) -> Any:
    if not isinstance(op, dict):
        raise InvalidPatch(f"operation {number} must be an object")
    name = op.get("op")
    if name not in _OPS:
        raise InvalidPatch(f"operation {number}: op must be one of {sorted(_OPS)}")
    path = parse_pointer(op.get("path"))
    if name in ("add", "replace", "test") and "value" not in op:
        raise InvalidPatch(f"operation {number}: {name} needs a value")
    if name == "add":
        return _add(doc, path, op["value"])
    if name == "remove":
        return _remove(doc, path)
    if name == "replace":
        return _replace(doc, path, op["value"])
    if name == "test":
        if not json_equal(_get(doc, path), op["value"]):
            raise InvalidPatch(f"operation {number}: test failed at {op.get('path')!r}")
        return doc
    source = parse_pointer(op.get("from"))
    value = _get(doc, source)
    if name == "copy":
        return _add(doc, path, copy.deepcopy(value))
    if path[: len(source)] == source and len(path) > len(source):
        raise InvalidPatch(f"operation {number}: cannot move a value into its own child")
    if path == source:
        return doc
    return _add(_remove(doc, source), path, value)


def apply_patch(doc: Any, patch: Any) -> Any:
    """`doc` after every operation of `patch`, in order, or InvalidPatch (all or nothing).

    Raises:
        InvalidPatch: `patch` is not a list of operations, or one of them does not apply.
    """
    if not isinstance(patch, list):
        raise InvalidPatch("a JSON Patch is an array of operations")
    if len(patch) > MAX_PATCH_OPS:
        raise InvalidPatch(f"a patch holds at most {MAX_PATCH_OPS} operations")
    for number, op in enumerate(patch):
        try:
            doc = _operation(doc, op, number)
        except RecursionError:  # pragma: no cover - depth is limited before values arrive
            raise InvalidPatch(f"operation {number}: the value is nested too deep") from None
    return doc
