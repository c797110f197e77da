"""Webhook routes and deliveries, in process (issue #20).

The app here allows its loopback receiver explicitly (`ASR_WEBHOOK_ALLOW_NETWORKS`), as an
operator would allow an internal network; every other non-public target is still refused.
A `Deliverer` is driven by hand (`run_once`), so each test decides when deliveries go out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from app.main import create_app
from app.runtime.webhooks.delivery import Deliverer, DeliveryPolicy
from app.runtime.webhooks.targets import TargetPolicy, parse_networks
from app.services import services_of
from app.settings import Settings
from app.store.stores import Stores
from tests.conftest import TenantKey, make_tenant
from tests.loopback import serve
from tests.webhook_receiver import Receiver

ALLOW = "127.0.0.1/32"


@pytest.fixture(scope="module")
async def hook_app(settings: Settings) -> AsyncIterator[object]:
    application = create_app(settings.model_copy(update={"webhook_allow_networks": ALLOW}))
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def api(hook_app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=hook_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers
    ) as c:
        yield c


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rx = Receiver()
    with serve(rx) as url:
        yield rx, url


def deliverer(store: Stores, hook_app: object, **policy: float) -> Deliverer:
    return Deliverer(
        store.webhooks,
        owner=f"test-{uuid.uuid4().hex[:6]}",
        targets=TargetPolicy(parse_networks(ALLOW)),
        policy=DeliveryPolicy(**{"timeout_seconds": 5.0, **policy}),  # type: ignore[arg-type]
        observer=services_of(hook_app).metrics,  # type: ignore[arg-type]
    )


async def drain(d: Deliverer, rx: Receiver, want: int, *, rounds: int = 100) -> None:
    """Run the deliverer until the receiver holds `want` requests (bounded)."""
    for _ in range(rounds):
        await d.run_once()
        if len(rx.snapshot()) >= want:
            return
        await asyncio.sleep(0.02)


async def test_subscription_lifecycle_and_the_secret_shown_once(
    api: httpx.AsyncClient, receiver: tuple[Receiver, str]
) -> None:
    _, url = receiver
    made = await api.post(
        "/v1/webhooks",
        json={"url": url + "/hook", "event_types": ["RUN_FINISHED"], "description": "ci"},
    )
    assert made.status_code == 201, made.text
    body = made.json()
    webhook_id = body["webhook_id"]
    assert made.headers["location"] == f"/v1/webhooks/{webhook_id}"
    assert body["secret"].startswith("whsec_") and body["state"] == "active"
    read = (await api.get(f"/v1/webhooks/{webhook_id}")).json()
    assert "secret" not in read and read["event_types"] == ["RUN_FINISHED"]
    listed = (await api.get("/v1/webhooks", params={"limit": 1})).json()
    assert [w["webhook_id"] for w in listed["data"]] == [webhook_id] and "secret" not in listed[
        "data"
    ][0]
    off = await api.patch(f"/v1/webhooks/{webhook_id}", json={"state": "disabled"})
    assert (
        off.json()["state"] == "disabled" and off.json()["disabled_reason"] == "disabled_by_tenant"
    )
    on = await api.patch(f"/v1/webhooks/{webhook_id}", json={"state": "active", "session_id": "x"})
    assert on.json()["state"] == "active" and on.json()["disabled_reason"] is None
    assert on.json()["session_id"] == "x"
    cleared = await api.patch(f"/v1/webhooks/{webhook_id}", json={"session_id": None})
    assert cleared.json()["session_id"] is None
    assert (await api.delete(f"/v1/webhooks/{webhook_id}")).status_code == 204
    gone = await api.get(f"/v1/webhooks/{webhook_id}")
    assert gone.status_code == 404 and gone.json()["code"] == "webhook_not_found"


async def test_bad_subscriptions_are_problems_not_errors(
    api: httpx.AsyncClient, receiver: tuple[Receiver, str]
) -> None:
    _, url = receiver
    cases = [
        ({"url": url, "event_types": ["NO_SUCH_TYPE"]}, "invalid_webhook"),
        ({"url": url, "event_types": []}, "validation_error"),
        ({"url": url, "event_types": ["*"], "metadata_filter": {"a.b": "x"}}, "invalid_webhook"),
        (
            {"url": url, "event_types": ["*"], "metadata_filter": {"a": {"b": 1}}},
            "validation_error",
        ),
        ({"url": url, "event_types": ["*"], "tenant_id": "x"}, "validation_error"),
        ({"url": "http://10.0.0.1/h", "event_types": ["*"]}, "unsafe_webhook_target"),
        ({"url": "http://169.254.169.254/", "event_types": ["*"]}, "unsafe_webhook_target"),
        ({"url": "http://127.0.0.2/h", "event_types": ["*"]}, "unsafe_webhook_target"),
        ({"url": "http://[::1]/h", "event_types": ["*"]}, "unsafe_webhook_target"),
        ({"url": "gopher://x/", "event_types": ["*"]}, "unsafe_webhook_target"),
        ({"url": "not a url", "event_types": ["*"]}, "unsafe_webhook_target"),
    ]
    for body, code in cases:
        answer = await api.post("/v1/webhooks", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == code, body
    made = (await api.post("/v1/webhooks", json={"url": url, "event_types": ["*"]})).json()
    bad = await api.patch(f"/v1/webhooks/{made['webhook_id']}", json={"url": None})
    assert bad.status_code == 422
    bad = await api.patch(f"/v1/webhooks/{made['webhook_id']}", json={"url": "http://10.1.1.1/"})
    assert bad.json()["code"] == "unsafe_webhook_target"


async def test_another_tenants_subscription_is_not_found(
    api: httpx.AsyncClient, store: Stores, receiver: tuple[Receiver, str]
) -> None:
    _, url = receiver
    made = (await api.post("/v1/webhooks", json={"url": url, "event_types": ["*"]})).json()
    other = await make_tenant(store)
    path = f"/v1/webhooks/{made['webhook_id']}"
    for method, suffix in [
        ("GET", ""),
        ("PATCH", ""),
        ("DELETE", ""),
        ("GET", "/deliveries"),
        ("POST", "/deliveries/x/redeliver"),
    ]:
        answer = await api.request(
            method, path + suffix, headers=other.headers, json={} if method == "PATCH" else None
        )
        assert answer.status_code == 404, (method, suffix)
    listed = (await api.get("/v1/webhooks", headers=other.headers)).json()
    assert listed["data"] == []


async def test_idempotent_create_replays_the_same_subscription(
    api: httpx.AsyncClient, receiver: tuple[Receiver, str]
) -> None:
    _, url = receiver
    body = {"url": url, "event_types": ["SESSION_CREATED"]}
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    first = await api.post("/v1/webhooks", json=body, headers=key)
    again = await api.post("/v1/webhooks", json=body, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["webhook_id"] == first.json()["webhook_id"]
    assert again.json()["secret"] == first.json()["secret"]
    other = await api.post("/v1/webhooks", json={**body, "description": "x"}, headers=key)
    assert other.status_code == 422


async def test_signed_deliveries_in_order_with_a_log_and_redeliver(
    api: httpx.AsyncClient,
    store: Stores,
    hook_app: object,
    receiver: tuple[Receiver, str],
) -> None:
    rx, url = receiver
    made = (
        await api.post(
            "/v1/webhooks",
            json={"url": url + "/in", "event_types": ["SESSION_CREATED", "RUN_FINISHED"]},
        )
    ).json()
    secret, webhook_id = made["secret"], made["webhook_id"]
    sid = (await api.post("/v1/sessions", json={})).json()["session_id"]
    for text in ("one", "two"):
        run = await api.post(f"/v1/sessions/{sid}/runs", json={"input": text, "mode": "wait"})
        assert run.status_code == 200, run.text
    d = deliverer(store, hook_app)
    try:
        await drain(d, rx, 3)
    finally:
        await d.stop()
    got = rx.snapshot()
    verified = [Webhook(secret).verify(r.body, r.headers) for r in got]
    assert [v["type"] for v in verified] == ["SESSION_CREATED", "RUN_FINISHED", "RUN_FINISHED"]
    seqs = [v["data"]["seq"] for v in verified]
    assert seqs == sorted(seqs) and all(v["data"]["session_id"] == sid for v in verified)
    assert [r.headers["webhook-id"] for r in got] == [v["data"]["event_id"] for v in verified]
    assert "whsec_" not in str([r.body for r in got])
    log = (await api.get(f"/v1/webhooks/{webhook_id}/deliveries")).json()["data"]
    assert {(e["status"], e["response_code"], e["attempts"]) for e in log} == {
        ("delivered", 204, 1)
    }
    page = (await api.get(f"/v1/webhooks/{webhook_id}/deliveries", params={"limit": 2})).json()
    assert len(page["data"]) == 2 and page["next_cursor"]
    rest = await api.get(
        f"/v1/webhooks/{webhook_id}/deliveries", params={"cursor": page["next_cursor"]}
    )
    assert len(rest.json()["data"]) == 1
    first_id = got[0].headers["webhook-id"]
    again = await api.post(f"/v1/webhooks/{webhook_id}/deliveries/{first_id}/redeliver")
    assert again.status_code == 202 and again.json()["status"] == "pending"
    d = deliverer(store, hook_app)
    try:
        await drain(d, rx, 4)
    finally:
        await d.stop()
    assert rx.snapshot()[-1].headers["webhook-id"] == first_id
    one = (await api.get(f"/v1/webhooks/{webhook_id}/deliveries/{first_id}")).json()
    assert one["status"] == "delivered" and one["attempts"] == 2
    missing = await api.get(f"/v1/webhooks/{webhook_id}/deliveries/nope")
    assert missing.status_code == 404 and missing.json()["code"] == "delivery_not_found"


async def test_a_failing_receiver_is_retried_then_the_subscription_is_disabled(
    api: httpx.AsyncClient,
    store: Stores,
    hook_app: object,
    receiver: tuple[Receiver, str],
) -> None:
    rx, url = receiver
    rx.status = 500
    made = (await api.post("/v1/webhooks", json={"url": url, "event_types": ["*"]})).json()
    await api.post("/v1/sessions", json={})
    # A retry window of a few seconds: attempts back off (jittered, at least 0.5 s), then
    # the delivery fails and the subscription is switched off.
    d = deliverer(store, hook_app, retry_window_seconds=1.0, backoff_base_seconds=0.1)
    try:
        for _ in range(200):
            await d.run_once()
            hook = (await api.get(f"/v1/webhooks/{made['webhook_id']}")).json()
            if hook["state"] == "disabled":
                break
            await asyncio.sleep(0.05)
    finally:
        await d.stop()
    assert hook["state"] == "disabled" and hook["disabled_reason"] == "deliveries_failing"
    assert hook["consecutive_failures"] >= 2 and len(rx.snapshot()) >= 2
    log = (await api.get(f"/v1/webhooks/{made['webhook_id']}/deliveries")).json()["data"]
    assert [(e["status"], e["response_code"], e["last_error"]) for e in log] == [
        ("failed", 500, "HTTP 500")
    ]
    metrics = (await api.get("/metrics")).text
    assert 'asr_webhook_delivery_attempts_total{outcome="failed"}' in metrics
    assert "asr_webhook_deliveries_failed_total" in metrics


async def test_redirects_and_addresses_refused_at_delivery_time_are_not_followed(
    api: httpx.AsyncClient,
    store: Stores,
    hook_app: object,
    receiver: tuple[Receiver, str],
) -> None:
    rx, url = receiver
    rx.redirect_path = "/moved"
    moved = (
        await api.post("/v1/webhooks", json={"url": url + "/moved", "event_types": ["*"]})
    ).json()
    sid = (await api.post("/v1/sessions", json={})).json()["session_id"]
    d = deliverer(store, hook_app)
    try:
        await drain(d, rx, 1)
        await asyncio.sleep(0.1)
    finally:
        await d.stop()
    assert [r.path for r in rx.snapshot()] == ["/moved"]  # /elsewhere never reached
    log = (await api.get(f"/v1/webhooks/{moved['webhook_id']}/deliveries")).json()["data"]
    assert log[0]["status"] == "pending" and log[0]["response_code"] == 302
    assert "redirect" in log[0]["last_error"]
    await api.delete(f"/v1/webhooks/{moved['webhook_id']}")
    # Allowed when subscribed, refused when delivered (the operator's policy changed, or a
    # name now resolves elsewhere): nothing is sent.
    rx.received.clear()
    later = (await api.post("/v1/webhooks", json={"url": url + "/x", "event_types": ["*"]})).json()
    await api.patch(f"/v1/sessions/{sid}", json={"metadata": {"a": "b"}})
    strict = Deliverer(
        store.webhooks, owner="strict", targets=TargetPolicy(), policy=DeliveryPolicy()
    )
    try:
        for _ in range(20):
            if await strict.run_once():
                break
            await asyncio.sleep(0.05)
    finally:
        await strict.stop()
    assert rx.snapshot() == []
    log = (await api.get(f"/v1/webhooks/{later['webhook_id']}/deliveries")).json()["data"]
    assert log[0]["status"] == "pending" and log[0]["last_error"].startswith("refused")
    await api.delete(f"/v1/webhooks/{later['webhook_id']}")


async def test_a_slow_receiver_times_out_and_enabling_again_resumes(
    api: httpx.AsyncClient,
    store: Stores,
    hook_app: object,
    receiver: tuple[Receiver, str],
) -> None:
    rx, url = receiver
    rx.delay = 2.0
    made = (await api.post("/v1/webhooks", json={"url": url, "event_types": ["*"]})).json()
    path = f"/v1/webhooks/{made['webhook_id']}"
    await api.post("/v1/sessions", json={})
    d = deliverer(store, hook_app, timeout_seconds=0.3, retry_window_seconds=0.0)
    try:
        for _ in range(50):
            await d.run_once()
            if (await api.get(path)).json()["state"] == "disabled":
                break
            await asyncio.sleep(0.05)
    finally:
        await d.stop()
    log = (await api.get(path + "/deliveries")).json()["data"]
    assert [(e["status"], e["last_error"]) for e in log] == [("failed", "timed out after 0.3 s")]
    # Fixed: on again, then the failed delivery is sent again on request.
    rx.delay = 0.0
    assert (await api.patch(path, json={"state": "active"})).json()["consecutive_failures"] == 0
    await api.post(f"{path}/deliveries/{log[0]['delivery_id']}/redeliver")
    d = deliverer(store, hook_app)
    try:
        for _ in range(100):
            await d.run_once()
            if (await api.get(path + "/deliveries")).json()["data"][0]["status"] == "delivered":
                break
            await asyncio.sleep(0.05)
    finally:
        await d.stop()
    assert (await api.get(path + "/deliveries")).json()["data"][0]["status"] == "delivered"
