"""Service settings: one class, read from `ASR_*` environment variables.

Nothing here does I/O at import time; `create_app(settings)` receives an instance, and tests
build their own instead of patching the environment.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the service. The README's settings table mirrors this class."""

    model_config = SettingsConfigDict(env_prefix="ASR_", extra="ignore")

    database_url: str = Field(
        default="sqlite+aiosqlite:///./asr.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://...",
    )
    database_direct_url: str | None = Field(
        default=None,
        description="A URL that bypasses any pooler (PgBouncer): used by `asr migrate` and the "
        "LISTEN connection of the event bus. Unset means ASR_DATABASE_URL.",
    )
    db_pgbouncer: bool = Field(
        default=False,
        description="ASR_DATABASE_URL points at PgBouncer in transaction pooling mode: no "
        "server-side prepared statement caching, unique statement names.",
    )
    database_read_urls: str = Field(
        default="",
        description="Comma-separated postgresql+asyncpg:// URLs of streaming read replicas of "
        "ASR_DATABASE_URL. Reads that tolerate a bounded lag (event pages, SSE catch-up, "
        "exports, session lists) go to them, each fenced by the least seq its caller is known "
        "to have seen: a replica that has not applied it is not used for that read. Writes "
        "and everything in a transaction stay on the primary. Empty: no replicas.",
    )
    db_read_consistency: Literal["strict", "session"] = Field(
        default="strict",
        description="What a read on a read replica may miss. strict: nothing acknowledged "
        "before the read began, on any replica of the service (the replica must have applied "
        "the primary's WAL flush position, asked once per burst of reads; it is waited for "
        "up to ASR_DB_READ_WAIT_MS, else the primary serves). session: only what the caller "
        "sent (after_seq, Last-Event-ID) and what this replica of the service committed or "
        "heard announced by NOTIFY; no round trip to the primary.",
    )
    db_read_wait_ms: float = Field(
        default=20.0,
        ge=0,
        le=1000,
        description="How long a read waits for a read replica to apply its fence before the "
        "primary serves it instead.",
    )
    db_read_timeout_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How long a read replica may take to connect or answer a health probe "
        "before it is skipped (and backed off) and the read goes to the primary.",
    )
    db_read_health_seconds: float = Field(
        default=2.0,
        gt=0,
        le=600,
        description="How often each read replica's health and lag are probed.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Processes `asr serve` runs, each a full replica with its own database "
        "pool (PostgreSQL only; SQLite has one writer). In a container: its CPU limit in cores.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = Field(
        default="json", description="`json`: one JSON object a line; `text`: for a terminal."
    )
    graceful_shutdown_seconds: int = Field(
        default=20,
        ge=1,
        le=600,
        description="On SIGTERM, how long `asr serve` drains open requests and streams.",
    )
    header_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="Close a connection that has not sent a complete request head this long "
        "after opening or after its first byte (slowloris). Responses and SSE streams are "
        "never cut by it. Behind a reverse proxy that reads heads itself, keep it at the "
        "proxy's own header timeout or below.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open connections one `asr serve` accepts work on; past it, the oldest "
        "connection still sending its request head is closed to make room (see "
        "ASR_SLOW_HEAD_GRACE_SECONDS), and if none is, a new request gets a 503. Lowered at "
        "start to fit `ulimit -n` minus the database pool and 64 spare descriptors.",
    )
    slow_head_grace_seconds: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="At the connection cap a new connection closes the oldest connection still "
        "sending its request head, once that one has been at it this long (a complete request "
        "head closes it whatever its age, and so does a new connection 16 past the cap). "
        "Slow clients are then cut before normal ones are refused.",
    )
    evict_slow_heads: bool = Field(
        default=True,
        description="Make room at the connection cap by closing the oldest connection still "
        "sending its request head (slowloris). `false`: past the cap a new request gets a 503, "
        "and nothing is closed before ASR_HEADER_TIMEOUT_SECONDS.",
    )
    gc_young_threshold: int = Field(
        default=50_000,
        ge=0,
        le=10_000_000,
        description="`asr serve`: new container objects (net) between two young collections "
        "of Python's garbage collector (Python's own default is 700; 0 keeps it). A run "
        "allocates thousands, so at Python's default the collector ran many times a run and "
        "its older generations' passes walked the whole heap: a share of every replica's "
        "CPU, and pauses in its latency. The older generations keep Python's thresholds.",
    )
    metrics_enabled: bool = Field(default=True, description="Serve Prometheus text at /metrics.")
    metrics_token: SecretStr | None = Field(
        default=None,
        description="If set, /metrics answers only requests with `Authorization: Bearer "
        "<this token>` (401 otherwise), for a scraper's `bearer_token`. Unset: open, as the "
        "health checks are; then keep /metrics off the public side of the proxy.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="The operators' bearer token for `/v1/admin/...` (tenant erasure, erasure "
        "receipts); at least 32 characters. Unset: those routes answer 404.",
    )
    otel_enabled: bool = Field(
        default=False, description="OpenTelemetry tracing (needs the `otel` extra)."
    )
    otel_exporter: Literal["otlp", "console", "none"] = Field(
        default="otlp",
        description="Where spans go: OTLP over HTTP (OTEL_EXPORTER_OTLP_* settings), the "
        "console, or nowhere (for a caller that adds its own processor).",
    )
    db_pool_size: int = Field(
        default=30,
        ge=1,
        le=200,
        description="Database connections each worker keeps: about 2 per request it serves "
        "at once (one for the request, one for its run), plus 8.",
    )
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = Field(
        default="NORMAL",
        description="SQLite's `PRAGMA synchronous` (always in WAL mode). NORMAL (default): "
        "no fsync per commit; the database never corrupts and a crash of the process (kill "
        "-9) loses no acknowledged write, but an OS crash or power cut may undo the last "
        "ones. FULL: a write is acknowledged only once it is on disk (one fsync per commit, "
        "shared by the writes group commit batches together). OFF / EXTRA: as SQLite says.",
    )
    db_max_overflow: int = Field(
        default=0,
        ge=0,
        le=200,
        description="Extra connections a worker may open at a peak, each closed again when "
        "it comes back: a new connection costs its start-up, its type introspection and every "
        "statement prepared again, more than waiting for a kept one; so none by default.",
    )
    snapshot_every: int = Field(
        default=200,
        ge=1,
        description="Write an automatic snapshot when loading state folds more events than this.",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest request body.")
    max_items_per_request: int = Field(default=256, ge=1)
    max_inline_bytes: int = Field(
        default=262_144, ge=0, description="Largest decoded inline base64 attachment in a message."
    )
    max_metadata_bytes: int = Field(default=16_384, ge=64)
    max_state_bytes: int = Field(
        default=65_536,
        ge=64,
        description="Largest shared state of a session (the JSON object its frontend and model "
        "edit), encoded; a write past it is a 413.",
    )
    max_event_bytes: int = Field(
        default=2_097_152, ge=1024, description="Largest event payload or snapshot (413 beyond)."
    )
    redact_patterns: list[str] = Field(
        default_factory=list,
        description="Extra regexes (JSON list) whose matches are redacted before persistence.",
    )
    max_sessions_per_tenant: int = Field(default=100_000, ge=1)
    max_live_runs_per_tenant: int = Field(
        default=32, ge=1, description="Active or queued runs per tenant, on all replicas (429)."
    )
    max_runs_per_minute: int = Field(
        default=600, ge=1, description="Runs a tenant may start per minute on one replica (429)."
    )
    page_limit_max: int = Field(default=1000, ge=1)
    idempotency_ttl_seconds: int = Field(default=86_400, ge=86_400)
    run_lease_seconds: float = Field(
        default=30.0, gt=0, description="A run's lease; a dead owner's run is interrupted after it."
    )
    run_sweep_seconds: float = Field(
        default=5.0, gt=0, description="How often each replica looks for expired run leases."
    )
    schedules_enabled: bool = Field(
        default=True,
        description="Run the scheduler on this replica (every replica may; each tick fires once).",
    )
    schedule_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How often each replica looks for due schedule ticks.",
    )
    schedule_claim_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a replica's claim of a tick holds; a tick whose claimer died is "
        "fired again (under the same Idempotency-Key) after it.",
    )
    schedule_misfire_grace_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A tick later than this is missed: the schedule's `missed` policy skips "
        "it or fires once for all missed ticks.",
    )
    run_wait_seconds: float = Field(
        default=600.0, gt=0, description="Longest a `mode: wait` request waits for its run."
    )
    openai_base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint (Chat Completions); None = OpenAI."
    )
    openai_api_key: SecretStr = Field(default=SecretStr(""), description="Never logged or stored.")
    openai_model: str = Field(default="gpt-4o-mini", description="Default model name.")
    openai_timeout_seconds: float = Field(default=60.0, gt=0)
    models_file: Path | None = Field(
        default=None,
        description="YAML file of model profiles (`profiles:`) and MCP servers "
        "(`mcp_servers:`); validated at start. Keys only by reference (env var or file).",
    )
    model_profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Model profiles as JSON ({name: {kind, base_url, api_key_env, ...}}); "
        "added to the models file's, winning on a name clash.",
    )
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="MCP servers as JSON ({name: {command: [...]} or {url: ...}}); added to "
        "the models file's, winning on a name clash.",
    )
    processes_enabled: bool = Field(
        default=False,
        description="The process plane: the `shell` tool and the processes routes (off: 404).",
    )
    workspace_root: Path = Field(
        default=Path("./workspaces"),
        description="Processes run in <root>/<tenant_id>/<binding.workspace or session id>.",
    )
    process_allowlist: str = Field(
        default="sleep,echo,cat,ls,python3,printf,yes,true,false",
        description="Programs the shell tool may start, comma-separated; empty = any program "
        "not on the denylist.",
    )
    process_denylist: str = Field(
        default="", description="Programs never started, comma-separated (checked first)."
    )
    process_max_runtime_seconds: float = Field(
        default=300.0, gt=0, le=86_400, description="A process is killed after this."
    )
    process_max_output_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="Captured output per process; past it the process is killed.",
    )
    process_persisted_output_bytes: int = Field(
        default=16_384,
        ge=0,
        le=262_144,
        description="Tail of the output kept in PROCESS_EXITED (readable after a restart).",
    )
    process_max_live_per_tenant: int = Field(
        default=4, ge=1, description="Live processes per tenant on one server (429 beyond)."
    )
    process_path: str = Field(
        default="/usr/local/bin:/usr/bin:/bin",
        description="PATH of started processes (their whole environment is rebuilt).",
    )
    delegation_max_depth: int = Field(
        default=3, ge=0, le=32, description="Longest parent chain a delegated child may have."
    )
    delegation_timeout_seconds: float = Field(
        default=300.0, gt=0, description="Longest a `delegate` call waits for its child's run."
    )
    bootstrap_default_tenant: bool = Field(
        default=True, description="On first start with no tenant, create `default` and print a key."
    )
    # Live timelines (Server-Sent Events)
    sse_ping_seconds: float = Field(
        default=10.0, gt=0, le=15, description="Comment heartbeat interval (proxies cut at ~30 s)."
    )
    sse_retry_ms: int = Field(
        default=2000, ge=100, le=60_000, description="`retry:` sent once at stream start."
    )
    sse_send_timeout_seconds: float = Field(
        default=10.0, gt=0, le=120, description="A send blocked this long closes the stream."
    )
    sse_shutdown_grace_seconds: float = Field(
        default=5.0,
        ge=0,
        lt=20,
        description="On shutdown, streams get this long to say goodbye (below uvicorn's 20 s).",
    )
    sse_queue_size: int = Field(
        default=1000, ge=8, le=100_000, description="Live items queued per stream before overflow."
    )
    sse_replay_batch: int = Field(default=500, ge=1, le=10_000, description="Rows per replay read.")
    sse_max_streams_per_tenant: int = Field(
        default=100, ge=1, description="Open streams per tenant on one server (429 beyond)."
    )
    sse_poll_seconds: float = Field(
        default=2.0, gt=0, le=300, description="Fallback poll for new events (lost NOTIFYs)."
    )
    sse_notify: bool = Field(default=True, description="PostgreSQL: NOTIFY on commit and LISTEN.")
    sse_notify_interval_ms: float = Field(
        default=5,
        ge=0,
        le=1000,
        description="PostgreSQL: commits' wake-ups go to other replicas at most this often "
        "(coalesced into one NOTIFY transaction), and so do token deltas (in one of their "
        "own); a send after a quiet spell goes at once.",
    )
    sse_notify_interest: bool = Field(
        default=True,
        description="PostgreSQL: a session's wake-ups and token deltas go to the other "
        "replicas only while one of them has a live subscriber of it (each replica announces "
        "what it listens to); false sends every one to every replica, as a replica of a "
        "version before this setting expects during a rolling upgrade.",
    )
    sse_interest_renew_seconds: float = Field(
        default=10.0,
        ge=0.5,
        le=300,
        description="PostgreSQL: how often a replica repeats what it listens to; the others "
        "forget it after three of these. A replica whose listener (re)connects asks the others "
        "for theirs and sends everything for two seconds meanwhile.",
    )
    sse_listen_keepalive_seconds: float = Field(
        default=5.0, gt=0, le=60, description="How often the LISTEN connection is checked."
    )
    sse_delta_flush_ms: int = Field(
        default=50,
        ge=0,
        le=1000,
        description="A run's token deltas leave it at most this often (the writer tick): the "
        "first after a quiet tick as soon as the model yields (with the chunks of its burst), "
        "the rest coalesced into one frame per tick for the bus, the other replicas' NOTIFY "
        "and every stream; 0 sends every chunk.",
    )
    sse_handoff_delay_ms: int = Field(
        default=0, ge=0, le=5000, description="Test-only fault point between subscribe and replay."
    )
    listen_database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL for the LISTEN connection (default: database_url); "
        "point it past a transaction-mode pooler, which cannot LISTEN.",
    )
    stream_token_secret: SecretStr | None = Field(
        default=None,
        description="HMAC key of stream tokens; replicas must share it. Unset: random per process.",
    )
    stream_token_ttl_seconds: int = Field(default=300, ge=10, le=3600)
    sse_key_check_seconds: float = Field(
        default=2.0,
        gt=0,
        le=4,
        description="How often the keys of open streams are re-checked: a stream whose key "
        "was revoked (or deleted with its tenant) ends within this, plus one query.",
    )
    cors_origins: str = Field(
        default="",
        description="Browser origins allowed to call the API from another origin, exact and "
        "comma-separated (e.g. `https://app.example.com,http://localhost:5173`); empty: none.",
    )
    cors_allow_headers: str = Field(
        default=(
            "Authorization,Content-Type,Accept,Idempotency-Key,If-Match,Last-Event-ID,"
            "X-Request-ID,traceparent,tracestate"
        ),
        description="Request headers a page on an allowed origin may send (its preflight "
        "asks for them), comma-separated; the default covers the API's own and W3C Trace "
        "Context (`traceparent`, `tracestate`). Add what your frontend's tracing or SDK sends.",
    )
    debug_endpoints: bool = Field(default=False, description="Serve /debug/streams (tests only).")
    agents_file: Path | None = Field(
        default=None,
        description="YAML file of named agent specs (blueprints), validated at start.",
    )
    retention_idle_days: int | None = Field(
        default=None,
        ge=1,
        description="`asr retention run` erases sessions not updated for this many days; "
        "unset keeps every session.",
    )
    retention_interval_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="Each replica runs a retention pass this often (tenants' policies, "
        "sessions' expiry and idle TTL, pruning, old snapshots); every replica may, each "
        "session is deleted or pruned once. 0: only `asr retention run` applies them.",
    )
    retention_keep_snapshots: int = Field(
        default=3, ge=1, description="`asr retention run` keeps this many newest snapshots."
    )
    erasure_children: Literal["erase", "keep"] = Field(
        default="erase",
        description="Erasing a session also erases the sessions it delegated work to (`erase`), "
        "or leaves them (`keep`). Forks are never touched: they hold copies of their own.",
    )
    retention_webhook_log_days: int | None = Field(
        default=30,
        ge=1,
        description="`asr retention run` drops delivered and failed webhook deliveries older "
        "than this many days from the delivery log; unset keeps them all.",
    )
    webhooks_enabled: bool = Field(
        default=True,
        description="Run the webhook deliverer on this replica: it claims due deliveries from "
        "the outbox and sends them. Any number of replicas may run it at once.",
    )
    webhook_allow_networks: str = Field(
        default="",
        description="Comma-separated networks (CIDR) webhooks may reach although they are not "
        "public, e.g. `10.20.0.0/16` for an internal receiver. Unset: loopback, private, "
        "link-local and other non-public addresses are refused (SSRF).",
    )
    webhook_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="Time limit of one delivery attempt, connection to last byte read.",
    )
    webhook_max_response_bytes: int = Field(
        default=65_536,
        ge=0,
        le=10_485_760,
        description="At most this much of a receiver's answer is read (only its status counts).",
    )
    webhook_retry_window_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="A delivery is retried (exponential backoff, jitter) this long after its "
        "first attempt; then it is marked failed and its subscription disabled.",
    )
    webhook_backoff_base_seconds: float = Field(
        default=5.0, gt=0, description="Delay ceiling after the first failed attempt; doubles."
    )
    webhook_backoff_cap_seconds: float = Field(
        default=3_600.0, gt=0, description="Largest delay ceiling between two attempts."
    )
    webhook_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How often an idle deliverer looks for due deliveries.",
    )
    webhook_batch: int = Field(
        default=8, ge=1, le=256, description="Deliveries one replica attempts at once."
    )
    webhook_max_per_tenant: int = Field(
        default=100, ge=1, description="Webhook subscriptions one tenant may have."
    )

    @field_validator("webhook_allow_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        for part in (p.strip() for p in value.split(",")):
            if part:
                ipaddress.ip_network(part)  # raises ValueError with the reason
        return value

    @field_validator("database_url", "database_direct_url")
    @classmethod
    def _known_driver(cls, value: str | None) -> str | None:
        # Only the two async drivers the store is tested on are accepted; a sync URL would fail
        # later and far less clearly.
        if value is not None and not value.startswith(
            ("sqlite+aiosqlite://", "postgresql+asyncpg://")
        ):
            raise ValueError("database_url must use sqlite+aiosqlite:// or postgresql+asyncpg://")
        return value

    @field_validator("database_read_urls")
    @classmethod
    def _postgres_read_urls(cls, value: str) -> str:
        for url in split_origins(value):
            if not url.startswith("postgresql+asyncpg://"):
                raise ValueError("database_read_urls must be postgresql+asyncpg:// URLs")
        return value

    @field_validator("listen_database_url")
    @classmethod
    def _postgres_listen_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgresql+asyncpg://")):
            raise ValueError("listen_database_url must be a postgresql:// URL")
        return value

    @field_validator("admin_token")
    @classmethod
    def _strong_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("admin_token must be at least 32 characters")
        return value

    @field_validator("stream_token_secret")
    @classmethod
    def _strong_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("stream_token_secret must be at least 32 characters")
        return value

    @field_validator("process_allowlist", "process_denylist")
    @classmethod
    def _program_names(cls, value: str) -> str:
        # Programs are matched by bare name; a path here could never match and would only
        # mislead whoever reads the configuration.
        for name in (part.strip() for part in value.split(",")):
            if name and ("/" in name or not name.isprintable() or " " in name):
                raise ValueError(f"{name!r} is not a program name")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _exact_origins(cls, value: str) -> str:
        # Exact origins only: a wildcard would let any page drive the API with a key it holds,
        # and a path or trailing slash could never equal a browser's Origin header.
        for origin in split_origins(value):
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(f"{origin!r} is not an origin such as https://app.example.com")
        return value

    @field_validator("cors_allow_headers")
    @classmethod
    def _header_names(cls, value: str) -> str:
        # A header name is an HTTP token; `*` would admit any header, which with a bearer key
        # is not what an operator means by a list.
        for name in split_origins(value):
            if not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in name) or name == "*":
                raise ValueError(f"{name!r} is not a header name")
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def read_urls(self) -> list[str]:
        """The read replicas' URLs (`ASR_DATABASE_READ_URLS`), in order."""
        return split_origins(self.database_read_urls)

    @property
    def direct_url(self) -> str:
        """The URL for migrations and LISTEN: never through a transaction pooler."""
        return self.database_direct_url or self.database_url


@lru_cache
def get_settings() -> Settings:
    """Settings from the environment, read once per process."""
    return Settings()


def split_origins(value: str) -> list[str]:
    """`ASR_CORS_ORIGINS` (or another comma-separated setting) as a list, blanks dropped."""
    return [part.strip() for part in value.split(",") if part.strip()]
