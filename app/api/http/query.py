"""A query parameter that takes one value may be given once.

FastAPI reads a single-valued query parameter with `query_params.get`, which keeps the last
of several (`?limit=5&limit=900` lists 900), so a request outside the document's schema would
be answered as if it were inside it. This refuses such a request with the same 422
`validation_error` problem as any other schema violation, naming each repeated parameter.

Which parameters take one value is read off each route's own declaration once, when the app
is built; a list parameter (`types`) may repeat, as its schema says. A request with no query
string pays nothing, one with a query string a parse, and only a repeated name costs a route
match. The check runs at the edge, before authentication, like the body limit and the NUL
check beside it: the shape of a request is public, its answer reveals nothing.
"""

from __future__ import annotations

import types
import typing
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl

from fastapi.exceptions import RequestValidationError
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.api.http.problems import validation_problem

# A bare `str` is a Sequence too, so only a parameterized Sequence counts as many values.
_CONTAINERS = (list, tuple, set, frozenset)
_MANY = (*_CONTAINERS, Sequence)


def takes_many(annotation: Any) -> bool:
    """Whether a parameter so annotated reads every value given (`list[str] | None`)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return takes_many(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(takes_many(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        return isinstance(origin, type) and issubclass(origin, _MANY)
    return isinstance(annotation, type) and issubclass(annotation, _CONTAINERS)


def _query_fields(dependant: Any) -> Iterator[Any]:
    """The query parameters of a route's endpoint and of every dependency it declares."""
    stack = [dependant]
    while stack:
        current = stack.pop()
        yield from getattr(current, "query_params", ())
        stack.extend(getattr(current, "dependencies", ()))


def single_valued(route: BaseRoute) -> frozenset[str]:
    """The names of the query parameters `route` reads one value of."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return frozenset()
    return frozenset(
        field.alias
        for field in _query_fields(dependant)
        if not takes_many(field.field_info.annotation)
    )


def repeated(query_string: bytes) -> set[str]:
    """The names given more than once, parsed as Starlette parses `request.query_params`."""
    counts = Counter(name for name, _ in parse_qsl(query_string.decode("latin-1"), True))
    return {name for name, count in counts.items() if count > 1}


def _repeat_error(name: str) -> dict[str, Any]:
    """A repeated parameter's entry in a 422's `errors`, shaped as FastAPI's own."""
    return {
        "loc": ["query", name],
        "msg": "this parameter takes one value; it was given more than once",
        "type": "repeated_parameter",
    }


def prefixed(items: Iterable[tuple[str, str]], prefix: str) -> dict[str, str]:
    """The parameters named `<prefix><key>`, by key: filters a route reads by a name it
    cannot declare (`metadata.<key>`). Each takes one value, so a repeat is refused like
    a declared parameter's."""
    found: dict[str, str] = {}
    twice: list[str] = []
    for name, value in items:
        if name.startswith(prefix) and len(name) > len(prefix):
            key = name[len(prefix) :]
            if key in found:
                twice.append(name)
            found[key] = value
    if twice:
        raise RequestValidationError([_repeat_error(name) for name in dict.fromkeys(twice)])
    return found


class SingleValuedQuery:
    """The routes that read single values, and the refusal of a request that repeats one."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        # Every route, in the order they are matched: the first that matches a request is
        # the one that answers it, whether or not it reads single values.
        self._routes = [(route, single_valued(route)) for route in routes]
        self._any = any(names for _, names in self._routes)

    def refusal(self, scope: Scope) -> Response | None:
        """A 422 problem when the request repeats a parameter its route reads once, else None."""
        query_string: bytes = scope.get("query_string", b"")
        if not query_string or not self._any:
            return None
        names = repeated(query_string)
        if not names:
            return None
        for route, single in self._routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                refused = sorted(names & single)
                if not refused:
                    return None
                return validation_problem(
                    None,
                    [_repeat_error(name) for name in refused],
                    "the request does not match the schema: "
                    + ", ".join(refused)
                    + " may be given once",
                )
        return None
