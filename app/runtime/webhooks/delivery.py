"""`Deliverer`: each replica's worker that sends the outbox's deliveries.

Every replica runs one. It claims due deliveries (`claim_webhook_deliveries`: across tenants,
on PostgreSQL with FOR UPDATE SKIP LOCKED, so replicas never take the same row; each claim is
a lease, so a replica that dies mid-delivery only delays that delivery until its lease
lapses), sends each one, and settles the attempt in the tenant's own transaction, fenced by
the claim's owner and attempt number. A claim is only ever the oldest pending delivery of
its (subscription, session), so a session's events reach a subscription in order; a later
event waits while an earlier one is retried.

At least once: an attempt whose outcome could not be recorded (the replica died, the
database went away) is sent again; receivers deduplicate on `webhook-id`, which is the event
id. A non-2xx answer, a timeout, a refused address or a redirect is a failed attempt, retried
with exponential backoff and full jitter until `retry_window_seconds` after the first
attempt; then the delivery is `failed` and its subscription disabled (`deliveries_failing`).

What is sent depends on the subscription's `format`: `standard` is the Standard Webhooks
envelope (`delivery_body`); any other format has a `Renderer`, given at assembly (the A2A
push notification's lives with the A2A API), that renders the body and any headers of its
own at each attempt (the same body every time: it reads only what the ledger held up to the
event), or says the event is none of the subscription's news, and the delivery is dropped
unsent. Every format's deliveries are signed, retried and fenced the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from app.runtime.errors import UnsafeWebhookTarget
from app.runtime.observer import NullObserver, Observer
from app.runtime.session.events import Event
from app.runtime.webhooks.records import (
    DELIVERED,
    DROPPED,
    FAILED,
    PENDING,
    STANDARD,
    Claim,
    ClaimedWork,
    Outcome,
    WebhookPort,
    WebhookRecord,
)
from app.runtime.webhooks.signing import signed_headers
from app.runtime.webhooks.targets import TargetPolicy

log = logging.getLogger("app.webhooks")

DISABLED_FAILING = "deliveries_failing"
_USER_AGENT = "asr-webhooks/1"


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Timing and limits of attempts (from the ASR_WEBHOOK_* settings)."""

    timeout_seconds: float = 10.0
    max_response_bytes: int = 65_536
    retry_window_seconds: float = 86_400.0
    backoff_base_seconds: float = 5.0
    backoff_cap_seconds: float = 3_600.0
    poll_seconds: float = 1.0
    batch: int = 8

    @property
    def lease_seconds(self) -> int:
        """A claim outlives the slowest attempt (timeout plus a settle) with a margin."""
        return int(self.timeout_seconds * 2) + 10


def backoff(
    attempts: int, policy: DeliveryPolicy, rand: Callable[[], float] = random.random
) -> float:
    """Seconds before the next attempt after `attempts` failed ones: exponential, capped,
    with full jitter (so many receivers failing at once do not retry in lockstep)."""
    ceiling: float = min(
        policy.backoff_cap_seconds, policy.backoff_base_seconds * 2 ** min(max(attempts - 1, 0), 40)
    )
    return max(0.5, ceiling * rand())


def delivery_body(event: Event) -> bytes:
    """What the receiver gets: Standard Webhooks' `{type, timestamp, data}`, `data` being
    the event as the API shows it."""
    data = {
        "event_id": event.event_id,
        "session_id": event.session_id,
        "seq": event.seq,
        "type": event.type,
        "run_id": event.run_id,
        "turn_id": event.turn_id,
        "payload": event.payload,
        "created_at": event.created_at.isoformat(),
    }
    body = {"type": event.type, "timestamp": event.created_at.isoformat(), "data": data}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Rendered:
    """A delivery's body and the headers its format adds (the signature is added after)."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Renderer(Protocol):
    """Renders one delivery of a subscription whose format it serves; None when the event
    is none of that subscription's news (the delivery is dropped, unsent). It may read the
    store; an exception leaves the delivery unsettled, so it is attempted again."""

    async def __call__(self, webhook: WebhookRecord, event: Event) -> Rendered | None: ...


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt's result: a status code, or why there is none."""

    status_code: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class Deliverer:
    """Claims, sends and settles deliveries until stopped (one per replica)."""

    def __init__(
        self,
        store: WebhookPort,
        *,
        owner: str,
        targets: TargetPolicy,
        policy: DeliveryPolicy | None = None,
        observer: Observer | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        renderers: Mapping[str, Renderer] | None = None,
    ) -> None:
        self.store = store
        self.renderers = dict(renderers or {})
        self.owner = owner
        self.targets = targets
        self.policy = policy or DeliveryPolicy()
        self.observer = observer or NullObserver()
        self._client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            timeout=httpx.Timeout(self.policy.timeout_seconds),
            headers={"user-agent": _USER_AGENT},
            trust_env=False,  # no proxy from the environment: the checked address is called
        )
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="webhook-deliverer")

    async def stop(self, *, grace_seconds: float = 5.0) -> None:
        """Stop claiming, let the attempts in flight finish for up to `grace_seconds`, then
        cancel the rest (their claims lapse, and another replica, or this one after a
        restart, sends them again)."""
        self._stop.set()
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=grace_seconds)
            if not done:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.aclose()

    async def _loop(self) -> None:
        pause = self.policy.poll_seconds
        while not self._stop.is_set():
            try:
                done = await self.run_once()
                pause = self.policy.poll_seconds
            except Exception as exc:  # an outage: keep going, back off a little
                log.warning("webhook deliverer: %s: %s", type(exc).__name__, exc)
                done = 0
                pause = min(pause * 2, 30.0)
            if done < self.policy.batch:
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=pause)
                except TimeoutError:
                    pass

    async def run_once(self) -> int:
        """Claim one batch and attempt each of its deliveries; returns how many."""
        claims = await self.store.claim_webhook_deliveries(
            owner=self.owner, limit=self.policy.batch, lease_seconds=self.policy.lease_seconds
        )
        if claims:
            await asyncio.gather(*(self._deliver(c) for c in claims))
        return len(claims)

    async def _deliver(self, claim: Claim) -> None:
        try:
            work = await self.store.load_claimed(claim)
            if work is None:  # the subscription or the delivery was deleted meanwhile
                return
            outcome = await self._attempt(work)
            settled = await self.store.settle_delivery(claim, owner=self.owner, outcome=outcome)
        except Exception as exc:
            # Not settled: the claim lapses and the delivery is attempted again.
            log.warning("webhook delivery %s/%s not settled: %s", claim.webhook_id, claim.seq, exc)
            return
        if outcome.status == DROPPED:
            return  # nothing was sent: no attempt to count
        self.observer.webhook_attempted(outcome=outcome.status)
        if settled and outcome.status == DELIVERED and work.event is not None:
            lag = (outcome.attempted_at - work.event.created_at).total_seconds()
            self.observer.webhook_delivered(lag_seconds=lag)

    async def _attempt(self, work: ClaimedWork) -> Outcome:
        now = datetime.now(UTC)
        if work.event is None:
            return Outcome(status=FAILED, attempted_at=now, error="the event was erased")
        if work.webhook.format == STANDARD:
            rendered: Rendered | None = Rendered(delivery_body(work.event))
        elif (renderer := self.renderers.get(work.webhook.format)) is None:
            # A replica that does not know the format (an older one, mid-deploy): retried,
            # so a replica that does sends it.
            attempt = Attempt(None, f"no renderer for the format {work.webhook.format!r} here")
            return self._failed(work, attempt, now)
        else:
            rendered = await renderer(work.webhook, work.event)
        if rendered is None:
            return Outcome(status=DROPPED, attempted_at=now)
        attempt = await self.send(work.webhook.url, work.webhook.secret, work.event, rendered)
        if attempt.ok:
            return Outcome(status=DELIVERED, attempted_at=now, response_code=attempt.status_code)
        return self._failed(work, attempt, now)

    def _failed(self, work: ClaimedWork, attempt: Attempt, now: datetime) -> Outcome:
        """A failed attempt: retried later, or given up after the retry window."""
        started = work.delivery.retry_started_at or now
        if (now - started).total_seconds() >= self.policy.retry_window_seconds:
            return Outcome(
                status=FAILED,
                attempted_at=now,
                response_code=attempt.status_code,
                error=attempt.error,
                disable=DISABLED_FAILING,
            )
        delay = backoff(work.delivery.attempts, self.policy)
        return Outcome(
            status=PENDING,
            attempted_at=now,
            next_attempt_at=now + timedelta(seconds=delay),
            response_code=attempt.status_code,
            error=attempt.error,
        )

    async def send(
        self, url: str, secret: str, event: Event, rendered: Rendered | None = None
    ) -> Attempt:
        """One signed POST to the checked address, bounded in time and in what is read;
        the body is `rendered`'s, or the Standard Webhooks envelope of `event`."""
        rendered = rendered or Rendered(delivery_body(event))
        body = rendered.body
        headers = {
            **rendered.headers,
            **signed_headers(secret, msg_id=event.event_id, timestamp=int(time.time()), body=body),
        }
        headers["host"] = urlsplit(url).netloc
        try:
            async with asyncio.timeout(self.policy.timeout_seconds):
                # Resolved and checked at every attempt (DNS rebinding), inside the time limit.
                target = await self.targets.resolve(url)
                request = self._client.build_request(
                    "POST",
                    target.connect_url(),
                    content=body,
                    headers=headers,
                    extensions={"sni_hostname": target.host},
                )
                response = await self._client.send(request, stream=True)
                try:
                    await _read_capped(response, self.policy.max_response_bytes)
                finally:
                    await response.aclose()
        except UnsafeWebhookTarget as exc:
            return Attempt(None, f"refused: {exc.detail}")
        except TimeoutError:
            return Attempt(None, f"timed out after {self.policy.timeout_seconds:g} s")
        except httpx.HTTPError as exc:
            return Attempt(None, f"{type(exc).__name__}: {exc}"[:300])
        if 300 <= response.status_code < 400:
            return Attempt(response.status_code, "redirect refused: webhooks do not follow them")
        if response.status_code >= 300:
            return Attempt(response.status_code, f"HTTP {response.status_code}")
        return Attempt(response.status_code, None)


async def _read_capped(response: httpx.Response, cap: int) -> int:
    """Read at most `cap` bytes of the answer (only its status matters)."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read >= cap:
            break
    return read
