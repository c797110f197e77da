"""A query parameter that takes one value may be given once: a repeat is a 422 problem, as
any other schema violation, never an answer built from the last value."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Query
from fastapi.routing import APIRoute

from app.api.http.query import SingleValuedQuery, repeated, single_valued, takes_many
from app.api.routes import include_routers
from tests.api.http.test_errors import assert_problem


async def session_id(client: httpx.AsyncClient) -> str:
    created = await client.post("/v1/sessions", json={"metadata": {"user": "alice"}})
    assert created.status_code == 201, created.text
    return str(created.json()["session_id"])


def refused_names(response: httpx.Response) -> list[str]:
    body = assert_problem(response, 422, "validation_error")
    assert {err["type"] for err in body["errors"]} == {"repeated_parameter"}
    return [err["loc"][1] for err in body["errors"]]


@pytest.mark.parametrize(
    "query",
    [
        "run_id=a&run_id=b",
        "limit=5&limit=900",
        "limit=5&limit=5",  # the same value twice is still two values
        "run_id=&run_id=x",
        "run%5Fid=a&run_id=b",  # names compare as the router decodes them
        "types=X&limit=1&after_seq=0&limit=2",
    ],
)
async def test_a_repeated_single_valued_parameter_is_refused(
    client: httpx.AsyncClient, query: str
) -> None:
    sid = await session_id(client)
    response = await client.get(f"/v1/sessions/{sid}/events?{query}")
    assert refused_names(response) in (["run_id"], ["limit"])


async def test_every_repeated_parameter_is_named(client: httpx.AsyncClient) -> None:
    sid = await session_id(client)
    response = await client.get(f"/v1/sessions/{sid}/events?limit=1&run_id=a&limit=2&run_id=b")
    assert refused_names(response) == ["limit", "run_id"]


async def test_a_list_parameter_and_an_unknown_one_may_repeat(client: httpx.AsyncClient) -> None:
    sid = await session_id(client)
    response = await client.get(
        f"/v1/sessions/{sid}/events?types=SESSION_CREATED&types=NOPE&other=1&other=2"
    )
    assert response.status_code == 200, response.text
    assert [e["type"] for e in response.json()["data"]] == ["SESSION_CREATED"]


async def test_one_value_each_is_answered_as_before(client: httpx.AsyncClient) -> None:
    sid = await session_id(client)
    response = await client.get(f"/v1/sessions/{sid}/events?limit=1&after_seq=0&run_id=")
    assert response.status_code == 200, response.text


async def test_a_repeated_metadata_filter_is_refused(client: httpx.AsyncClient) -> None:
    await session_id(client)
    found = await client.get("/v1/sessions?metadata.user=alice&metadata.team=x")
    assert found.status_code == 200, found.text
    response = await client.get("/v1/sessions?metadata.user=alice&metadata.user=bob")
    assert refused_names(response) == ["metadata.user"]


async def test_a_stream_with_a_repeated_parameter_never_starts(client: httpx.AsyncClient) -> None:
    sid = await session_id(client)
    response = await client.get(f"/v1/sessions/{sid}/events/stream?after_seq=0&after_seq=1")
    assert refused_names(response) == ["after_seq"]


async def test_the_refusal_comes_before_authentication(anon: httpx.AsyncClient) -> None:
    """Like the body limit and the NUL check: the shape of a request is public, so refusing
    it first reveals nothing, and no credential is looked up for a request refused anyway."""
    response = await anon.get("/v1/sessions?limit=1&limit=2")
    assert refused_names(response) == ["limit"]
    assert (await anon.get("/v1/sessions?limit=1")).status_code == 401


def test_the_names_read_off_the_routes_are_the_documents(app: Any) -> None:
    """What the check refuses is what the OpenAPI document says takes one value: every query
    parameter whose schema is not an array, and only those. This also holds the check to
    FastAPI's route declarations, which it reads."""
    document = app.openapi()
    documented: dict[tuple[str, str], set[str]] = {}
    for path, item in document["paths"].items():
        for verb, operation in item.items():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                variants = schema.get("anyOf", [schema])
                if parameter["in"] == "query" and not any(
                    v.get("type") == "array" for v in variants
                ):
                    documented.setdefault((verb.upper(), path), set()).add(parameter["name"])
    assert documented, "the document declares single-valued query parameters"
    fresh = FastAPI()
    read: dict[tuple[str, str], set[str]] = {}
    for route in include_routers(fresh):
        if isinstance(route, APIRoute) and route.include_in_schema:
            for method in route.methods:
                if names := single_valued(route):
                    read[(method, route.path)] = set(names)
    assert read == documented


def test_takes_many_reads_the_annotation() -> None:
    assert takes_many(list[str]) and takes_many(list[str] | None)
    assert takes_many(Annotated[list[str] | None, Query()])
    assert not takes_many(str) and not takes_many(int | None) and not takes_many(bool)
    assert not takes_many(Annotated[str | None, Query(max_length=3)])


def test_repeated_parses_as_the_router_does() -> None:
    assert repeated(b"") == set()
    assert repeated(b"a=1&b=2&c") == set()
    assert repeated(b"a=1&a") == {"a"}
    assert repeated(b"a%20b=1&a+b=2") == {"a b"}


def test_a_request_without_a_query_string_costs_no_route_match() -> None:
    class Counting(APIRoute):
        matched = 0

        def matches(self, scope: Any) -> Any:
            Counting.matched += 1
            return super().matches(scope)

    def endpoint(limit: int = 1) -> None:
        return None

    query = SingleValuedQuery([Counting("/x", endpoint, methods=["GET"])])
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/x", "query_string": b""}
    assert query.refusal(scope) is None
    assert query.refusal({**scope, "query_string": b"limit=1&other=2"}) is None
    assert Counting.matched == 0
    assert query.refusal({**scope, "query_string": b"limit=1&limit=2"}) is not None
    assert Counting.matched == 1


def test_the_route_that_answers_decides() -> None:
    """Two routes may match one path: the first answers, so its parameters are the ones a
    request is held to, not those of a route it shadows."""

    def fixed() -> None:
        return None

    def paged(limit: int = 1) -> None:
        return None

    query = SingleValuedQuery(
        [
            APIRoute("/x/first", fixed, methods=["GET"]),
            APIRoute("/x/{name}", paged, methods=["GET"]),
        ]
    )
    scope: dict[str, Any] = {"type": "http", "method": "GET", "query_string": b"limit=1&limit=2"}
    assert query.refusal({**scope, "path": "/x/first"}) is None
    assert query.refusal({**scope, "path": "/x/other"}) is not None
