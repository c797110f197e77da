"""Errors are RFC 9457 problem+json with a stable code; bad input is 4xx, never 500.

Covers R17 (mass assignment) and the 401 rules of R18.
"""

from __future__ import annotations

import httpx
import pytest

from app.store.stores import Stores
from tests.conftest import TenantKey

PROBLEM = "application/problem+json"


def assert_problem(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert {"type", "title", "detail"} <= body.keys()
    return body


async def test_missing_bad_and_revoked_keys_get_the_same_401(
    anon: httpx.AsyncClient, store: Stores, tenant: TenantKey
) -> None:
    from app.runtime.access.accounts import Accounts

    raw, record = await Accounts(store.accounts).create_key(tenant.name, name="to-revoke")
    await Accounts(store.accounts).revoke_key(record.prefix)
    bodies = []
    for headers in (
        {},
        {"Authorization": "Bearer nonsense"},
        {"Authorization": "Bearer asr_000000000000_wrong"},
        {"Authorization": f"Bearer {raw}"},
        {"Authorization": f"Bearer {tenant.key}x"},
    ):
        response = await anon.get("/v1/sessions", headers=headers)
        body = assert_problem(response, 401, "unauthorized")
        bodies.append((body["detail"], body["title"]))
    assert len(set(bodies)) == 1


@pytest.mark.parametrize(
    "field",
    [
        "tenant_id",
        "seq",
        "version",
        "status",
        "last_seq",
        "created_at",
        "epoch",
        "upto_seq",
        "owner",
    ],
)
async def test_server_owned_fields_are_refused(client: httpx.AsyncClient, field: str) -> None:
    response = await client.post("/v1/sessions", json={field: "x"})
    assert_problem(response, 422, "validation_error")
    created = (await client.post("/v1/sessions", json={})).json()
    sid = created["session_id"]
    patch = await client.patch(f"/v1/sessions/{sid}", json={"metadata": {}, field: 1})
    assert_problem(patch, 422, "validation_error")
    items = await client.post(
        f"/v1/sessions/{sid}/items",
        json={"items": [{"type": "message", "role": "user", "content": "x", field: 1}]},
    )
    assert_problem(items, 422, "validation_error")
    fork = await client.post(f"/v1/sessions/{sid}/fork", json={field: 1})
    assert_problem(fork, 422, "validation_error")


async def test_responses_never_expose_internal_fields(client: httpx.AsyncClient) -> None:
    body = (await client.post("/v1/sessions", json={})).text
    for secret in ("tenant_id", "secret_hash", "lease_owner", "xact_id"):
        assert secret not in body


async def test_malformed_json_wrong_types_and_unknown_routes(client: httpx.AsyncClient) -> None:
    assert_problem(
        await client.post(
            "/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
        ),
        400,
        "malformed_json",
    )
    assert_problem(await client.post("/v1/sessions", json=[1, 2]), 422, "validation_error")
    assert_problem(
        await client.post("/v1/sessions", json={"metadata": "x"}), 422, "validation_error"
    )
    assert_problem(
        await client.post("/v1/sessions", json={"session_id": "../etc/passwd"}),
        422,
        "validation_error",
    )
    assert_problem(await client.get("/v1/nope"), 404, "not_found")
    assert_problem(await client.put("/v1/sessions"), 405, "method_not_allowed")
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    assert_problem(
        await client.get(f"/v1/sessions/{sid}/events", params={"after_seq": -1}),
        422,
        "validation_error",
    )
    assert_problem(
        await client.post(f"/v1/sessions/{sid}/items", json={"items": []}), 422, "validation_error"
    )


async def test_oversized_bodies_are_413_with_and_without_content_length(
    client: httpx.AsyncClient,
) -> None:
    big = b'{"metadata": {"x": "' + b"a" * 2_000_000 + b'"}}'
    assert_problem(
        await client.post(
            "/v1/sessions", content=big, headers={"content-type": "application/json"}
        ),
        413,
        "payload_too_large",
    )

    async def chunks():  # no Content-Length: chunked transfer
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    assert_problem(
        await client.post(
            "/v1/sessions", content=chunks(), headers={"content-type": "application/json"}
        ),
        413,
        "payload_too_large",
    )


async def test_metadata_over_its_limit_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/sessions", json={"metadata": {"x": "a" * 20_000}})
    assert_problem(response, 413, "payload_too_large")


async def test_r18_raw_keys_never_stored(store: Stores, tenant: TenantKey) -> None:
    from sqlalchemy import text

    from app.store.tables import metadata

    secret = tenant.key.split("_", 2)[2]
    dump = []
    async with store.database.read(tenant.tenant_id) as conn:
        for table in metadata.sorted_tables:
            dump.append(repr((await conn.execute(text(f"SELECT * FROM {table.name}"))).all()))
    blob = "\n".join(dump)
    assert tenant.key not in blob and secret not in blob
    assert tenant.key.split("_")[1] in blob  # the public prefix is what is stored


async def test_nul_in_path_or_query_is_400(client: httpx.AsyncClient) -> None:
    """Regression (schemathesis on PostgreSQL): a NUL in a filter reached the database."""
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    response = await client.get(f"/v1/sessions/{sid}/events", params={"types": "A\x00B"})
    assert_problem(response, 400, "invalid_characters")
    assert_problem(await client.get("/v1/sessions/a%00b"), 400, "invalid_characters")
