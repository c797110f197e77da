"""Domain errors of the runtime and the store.

Every error the service raises on purpose is an `AgentSessionError` with a stable `code`;
the HTTP layer maps each class to a status in one table (`app/api/http/problems.py`). Nothing here
knows about HTTP.

    AgentSessionError
    ├── NotFound
    │   ├── SessionNotFound          (also: another tenant's session)
    │   ├── SnapshotNotFound
    │   ├── ProcessNotFound
    │   ├── ProcessesDisabled        (the process plane is off: its routes do not exist)
    │   ├── AdminDisabled            (no ASR_ADMIN_TOKEN: the operators' routes do not exist)
    │   ├── WebhookNotFound          (also: another tenant's subscription)
    │   └── DeliveryNotFound
    ├── Conflict
    │   ├── SessionAlreadyExists
    │   ├── SeqConflict              (append with a stale expected_seq; carries current_seq)
    │   ├── VersionConflict          (If-Match on a stale version; carries current version)
    │   ├── BindingMismatch
    │   ├── HistoryPrunedError       (needs the ledger before a prune's marker)
    │   ├── RunAlreadyActive / RunNotActive / RunFenced / NothingPending
    │   ├── ProcessNotRunning        (stdin to a process that has ended)
    │   ├── TooManyWebhooks          (the tenant's cap on subscriptions)
    │   └── IdempotentReplay
    ├── InvalidRequest
    │   ├── InvalidForkPoint
    │   ├── InvalidItems
    │   ├── IdempotencyKeyReused     (same key, different body)
    │   ├── CommandNotAllowed        (not on the allowlist, or on the denylist)
    │   ├── UnsafeWebhookTarget      (SSRF: a webhook URL this server will not call)
    │   ├── InvalidWebhook           (an unknown event type, a bad filter)
    │   ├── WorkspaceOutsideRoot     (a workspace name that would leave the root)
    │   ├── DelegationTooDeep        (the parent chain is at the depth limit)
    │   ├── UnknownModelProfile      (the agent names a profile this server does not have)
    │   ├── ModelProfileNotConfigured (the profile's credential is not set; names the setting)
    │   ├── InvalidCursor            (a malformed stream cursor)
    │   │   └── CursorOutOfRange     (beyond the session's last seq)
    │   ├── JsonTooDeep              (JSON nested deeper than the limit)
    │   ├── NonFiniteNumber          (NaN or Infinity: Python reads them, JSON has none)
    │   └── PayloadTooLarge
    ├── TooManyRequests          (429, with Retry-After)
    │   └── TooManyProcesses     (the tenant's live processes on this server)
    ├── Unauthorized
    │   └── AdminUnauthorized    (the operators' routes: the admin token)
    ├── DatabaseUnavailable          (an outage: 503 with Retry-After; retrying may succeed)
    ├── TooManyStreams               (the tenant's cap on open streams; HTTP 429)
    └── TenantNotFound / KeyNotFound (CLI)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class AgentSessionError(Exception):
    """Root of every deliberate error; `code` is stable and part of the API contract."""

    code = "agent_session_error"

    def __init__(self, detail: str = "", **extra: Any) -> None:
        super().__init__(detail or self.__class__.__name__)
        self.detail = detail
        self.extra = extra


class NotFound(AgentSessionError):
    code = "not_found"


class SessionNotFound(NotFound):
    code = "session_not_found"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")


class RunNotFound(NotFound):
    code = "run_not_found"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")


class SnapshotNotFound(NotFound):
    code = "snapshot_not_found"


class ProcessNotFound(NotFound):
    code = "process_not_found"

    def __init__(self, process_id: str) -> None:
        super().__init__(f"process {process_id!r} not found in this session")


class ProcessesDisabled(NotFound):
    """The process plane is off (ASR_PROCESSES_ENABLED=false): its routes answer 404."""

    code = "processes_disabled"

    def __init__(self) -> None:
        super().__init__("background processes are disabled on this server")


class AdminDisabled(NotFound):
    """No operator token is set (ASR_ADMIN_TOKEN): the operators' routes do not exist."""

    code = "admin_disabled"

    def __init__(self) -> None:
        super().__init__("the operators' API is disabled on this server (ASR_ADMIN_TOKEN)")


class TenantNotFound(NotFound):
    code = "tenant_not_found"


class KeyNotFound(NotFound):
    code = "key_not_found"


class Conflict(AgentSessionError):
    code = "conflict"


class HistoryPrunedError(Conflict):
    """What needs the ledger before its HISTORY_PRUNED marker (and the snapshot kept at it
    is gone too): the history before `first_seq` is not there any more."""

    code = "history_pruned"

    def __init__(self, first_seq: int) -> None:
        super().__init__(f"the history before seq {first_seq} was pruned")
        self.first_seq = first_seq


class SessionAlreadyExists(Conflict):
    code = "session_exists"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")


class TenantAlreadyExists(Conflict):
    code = "tenant_exists"


class SeqConflict(Conflict):
    code = "seq_conflict"

    def __init__(self, expected_seq: int, current_seq: int) -> None:
        super().__init__(
            f"expected last seq {expected_seq}, but the session is at {current_seq}",
            expected_seq=expected_seq,
            current_seq=current_seq,
        )


class VersionConflict(Conflict):
    """A precondition on the session version failed (HTTP maps it to 412)."""

    code = "version_conflict"

    def __init__(self, expected_version: int, current_version: int) -> None:
        super().__init__(
            f"expected version {expected_version}, but the session is at {current_version}",
            expected_version=expected_version,
            current_version=current_version,
        )


class StaleSession(Exception):
    """A write conditional on the caller's cached view of a session found the session
    changed since. Internal: the caller reads the session again and retries; never an HTTP
    answer."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} changed since it was cached")


class RunAlreadyActive(Conflict):
    code = "run_in_progress"

    def __init__(self, active_run_id: str | None) -> None:
        super().__init__("the session already has an active run", active_run_id=active_run_id)


class RunNotActive(Conflict):
    code = "run_not_active"


class RunFenced(Conflict):
    """The run was taken over (cancelled, interrupted, lease expired): its owner must stop."""

    code = "run_fenced"


class NothingPending(Conflict):
    code = "nothing_pending"


class ToolCallsPending(Conflict):
    code = "tool_calls_pending"

    def __init__(self, call_ids: list[str]) -> None:
        super().__init__(
            "answer or decide the pending tool calls before sending new input",
            pending_call_ids=call_ids,
        )


class BindingMismatch(Conflict):
    code = "binding_mismatch"


class ProcessNotRunning(Conflict):
    code = "process_not_running"

    def __init__(self, process_id: str, status: str) -> None:
        super().__init__(f"process {process_id!r} is {status}, not running", process_status=status)


class IdempotentReplay(Conflict):
    """A write found its Idempotency-Key already recorded by a committed duplicate: the
    write rolled back, and the caller answers with the duplicate's outcome instead. The API
    catches it; if it ever reached a client it would be a 409, never a 500."""

    code = "idempotency_replay"

    def __init__(self, key: str) -> None:
        super().__init__("a request with this Idempotency-Key has already been applied")
        self.key = key


class InvalidRequest(AgentSessionError):
    code = "invalid_request"


class InvalidForkPoint(InvalidRequest):
    code = "invalid_fork_point"


class InvalidItems(InvalidRequest):
    code = "invalid_items"


class InvalidState(InvalidRequest):
    code = "invalid_state"


class InvalidPatch(InvalidRequest):
    """A JSON Patch (RFC 6902) that is malformed or does not apply (a failing `test`, a
    path that is missing): the state is left as it was."""

    code = "invalid_patch"


class IdempotencyKeyReused(InvalidRequest):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key was used with a different request")


class CommandNotAllowed(InvalidRequest):
    code = "command_not_allowed"


class WorkspaceOutsideRoot(InvalidRequest):
    code = "workspace_outside_root"


class DelegationTooDeep(InvalidRequest):
    code = "delegation_too_deep"

    def __init__(self, depth: int, max_depth: int) -> None:
        super().__init__(
            f"delegation refused: the child would be at depth {depth}, the limit is {max_depth}",
            depth=depth,
            max_depth=max_depth,
        )


class UnknownModelProfile(InvalidRequest):
    """The agent spec's `provider` names no model profile of this server."""

    code = "unknown_model_profile"

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(
            f"no model profile named {name!r}; known: {', '.join(known)} (GET /v1/models). "
            "Operators add profiles in ASR_MODELS_FILE or ASR_MODEL_PROFILES",
            profile=name,
            known=known,
        )


class ModelProfileNotConfigured(InvalidRequest):
    """The profile exists but cannot be used yet: `setting` says what to set."""

    code = "model_profile_not_configured"

    def __init__(self, name: str, setting: str) -> None:
        super().__init__(
            f"model profile {name!r} is not configured: set {setting}",
            profile=name,
            setting=setting,
        )


class JsonTooDeep(InvalidRequest):
    """A JSON value nested deeper than the service stores (readers would choke on it)."""

    code = "json_too_deep"

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON may be nested at most {max_depth} levels deep", max_depth=max_depth)


class NonFiniteNumber(InvalidRequest):
    """NaN, Infinity or -Infinity (or a literal too large for a double): not JSON numbers."""

    code = "non_finite_number"

    def __init__(self) -> None:
        super().__init__("numbers must be finite: NaN, Infinity and -Infinity are not JSON")


class PayloadTooLarge(AgentSessionError):
    code = "payload_too_large"


class TooManyRequests(AgentSessionError):
    """A per-tenant cap was hit; `retry_after` (seconds) becomes the Retry-After header."""

    code = "rate_limited"

    def __init__(self, detail: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(detail, retry_after=retry_after)
        if code is not None:
            self.code = code


def too_many_runs(limit: int | None) -> TooManyRequests:
    """The refusal of a run over the tenant's cap of live (queued or running) runs."""
    return TooManyRequests(
        f"at most {limit} active or queued runs per tenant", retry_after=1, code="too_many_runs"
    )


class Unauthorized(AgentSessionError):
    code = "unauthorized"

    def __init__(self) -> None:
        # One message for unknown, malformed and revoked keys: no oracle for which it was.
        super().__init__("missing or invalid API key")


class AdminUnauthorized(Unauthorized):
    """The operators' routes take the admin token, never a tenant's key."""

    def __init__(self) -> None:
        AgentSessionError.__init__(self, "missing or invalid admin token")


@dataclass(frozen=True, slots=True)
class OutageSignature:
    """How the persistence layer's outages arrive (the store names them, `app.store.outage`;
    the API answers them 503 `database_unavailable`): the exception classes to catch, and
    the check that decides for one instance. The default recognises nothing."""

    types: tuple[type[Exception], ...] = ()
    check: Callable[[BaseException], bool] = field(default=lambda _exc: False)

    def __call__(self, exc: BaseException) -> bool:
        return self.check(exc)


class DatabaseUnavailable(AgentSessionError):
    """The database cannot be reached right now (refused, lost, pool exhausted): the request
    did nothing the client can see, or nothing it cannot safely retry, and may succeed later."""

    code = "database_unavailable"

    def __init__(self, retry_after: int = 2) -> None:
        super().__init__(
            "the database is unavailable; retry after a moment", retry_after=retry_after
        )


class InvalidCursor(InvalidRequest):
    code = "invalid_cursor"


class CursorOutOfRange(InvalidCursor):
    """Resuming after a seq the session never reached would skip events silently."""

    code = "cursor_out_of_range"

    def __init__(self, cursor: int, last_seq: int) -> None:
        super().__init__(
            f"cursor {cursor} is beyond the session's last seq {last_seq}; "
            "restart the stream from after_seq=0 or a seq you received",
            last_seq=last_seq,
        )


class TooManyStreams(AgentSessionError):
    code = "too_many_streams"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this tenant already has {limit} open streams on this server", retry_after=5
        )


class TooManyProcesses(TooManyRequests):
    """The tenant's cap on live processes on this server."""

    code = "too_many_processes"

    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(
            f"this tenant already has {limit} live processes on this server",
            retry_after=retry_after,
        )


class WebhookNotFound(NotFound):
    """No such webhook subscription (another tenant's is not found either)."""

    code = "webhook_not_found"

    def __init__(self, webhook_id: str) -> None:
        super().__init__(f"no webhook subscription {webhook_id!r}", webhook_id=webhook_id)


class DeliveryNotFound(NotFound):
    """No delivery of this event to this subscription."""

    code = "delivery_not_found"

    def __init__(self, webhook_id: str, delivery_id: str) -> None:
        super().__init__(
            f"subscription {webhook_id!r} has no delivery {delivery_id!r}",
            webhook_id=webhook_id,
            delivery_id=delivery_id,
        )


class UnsafeWebhookTarget(InvalidRequest):
    """A webhook URL this server will not call: not http(s), or a loopback, private,
    link-local or otherwise non-public address that the operator did not allow (SSRF)."""

    code = "unsafe_webhook_target"


class InvalidWebhook(InvalidRequest):
    """A subscription that cannot match anything: an unknown event type, a bad filter."""

    code = "invalid_webhook"


class TooManyWebhooks(Conflict):
    """The tenant has as many subscriptions as the operator allows."""

    code = "too_many_webhooks"

    def __init__(self, limit: int) -> None:
        super().__init__(f"this tenant already has {limit} webhook subscriptions", limit=limit)
