"""Test harness: one real database per run, the schema from `alembic upgrade head`.

ASR_TEST_DATABASE_URL picks the backend: unset means a SQLite file (WAL) in a temp folder;
a postgresql+asyncpg:// URL names a server on which a fresh database is created for this run
and dropped afterwards. If that server cannot be reached the PostgreSQL run is skipped, except
under CI=true, where it fails.

Tests isolate by tenant: each test makes its own tenant and key, and asserts exact results
within it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.main import create_app
from app.runtime.access.accounts import Accounts
from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import Stores, open_stores
from tests.pgroles import drop_roles, make_roles

ROOT = Path(__file__).resolve().parents[1]
PG_ENV = "ASR_TEST_DATABASE_URL"


def _pg_admin_dsn(url: str) -> tuple[str, str]:
    """(asyncpg DSN of the server's maintenance db, the name of the db in `url`)."""
    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres")
    return admin.render_as_string(hide_password=False), parsed.database or "postgres"


async def _pg_exec(dsn: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(tmp_root: Path, label: str = "main") -> str:
    """A fresh, empty database URL on the configured backend."""
    base = os.environ.get(PG_ENV)
    if not base:
        return f"sqlite+aiosqlite:///{tmp_root / f'{label}.db'}"
    name = f"asr_test_{label}_{os.getpid()}_{secrets.token_hex(3)}"
    admin, _ = _pg_admin_dsn(base)
    try:
        asyncio.run(_pg_exec(admin, f'CREATE DATABASE "{name}"'))
    except (OSError, Exception) as exc:
        if os.environ.get("CI") == "true":
            pytest.exit(f"PostgreSQL expected under CI=true but unreachable: {exc}", returncode=3)
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    return make_url(base).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    if not url.startswith("postgresql"):
        return
    admin, name = _pg_admin_dsn(url)
    asyncio.run(_pg_exec(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's database. With ASR_TEST_DB_ROLES=true (PostgreSQL), the tests and the
    servers they start connect as the non-owner app role of deploy/postgres/roles.sql, so
    the row-level policies bind every query of the suite (R19)."""
    url = create_database(tmp_path_factory.mktemp("db"))
    if url.startswith("postgresql") and os.environ.get("ASR_TEST_DB_ROLES") == "true":
        roles = make_roles(url)
        yield roles.app_url
        drop_database(url)
        drop_roles(url, roles)
        return
    upgrade_head(url)
    yield url
    drop_database(url)


@pytest.fixture(scope="session")
def is_postgres(database_url: str) -> bool:
    return database_url.startswith("postgresql")


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # No webhook deliverer and no scheduler in the shared app: both work across tenants, so
    # in the test process they would claim other tests' deliveries and fire other tests'
    # schedules (a replica test that stops its servers would find its ticks fired by the
    # test process meanwhile). The tests of each start their own. No retention pass either:
    # it would drop other tests' old snapshots.
    return Settings(
        database_url=database_url,
        bootstrap_default_tenant=False,
        webhooks_enabled=False,
        schedules_enabled=False,
        retention_interval_seconds=0,
    )


@pytest.fixture(scope="session")
async def store(settings: Settings) -> AsyncIterator[Stores]:
    engine = make_engine(settings)
    yield open_stores(engine)
    await engine.dispose()


@dataclass(frozen=True)
class TenantKey:
    tenant_id: str
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def make_tenant(store: Stores) -> TenantKey:
    accounts = Accounts(store.accounts)
    name = f"t-{uuid.uuid4().hex[:12]}"
    tenant = await accounts.create_tenant(name)
    raw, _ = await accounts.create_key(name)
    return TenantKey(tenant_id=tenant.tenant_id, name=name, key=raw)


@pytest.fixture
async def tenant(store: Stores) -> TenantKey:
    return await make_tenant(store)


@pytest.fixture
async def other_tenant(store: Stores) -> TenantKey:
    return await make_tenant(store)


@pytest.fixture(scope="session")
async def app(settings: Settings) -> AsyncIterator[object]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers
    ) as c:
        yield c


@pytest.fixture
async def anon(app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as c:
        yield c


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def spawn_server(
    port: int, env: dict[str, str], log_path: Path, **popen: Any
) -> subprocess.Popen[bytes]:
    """`asr serve` on 127.0.0.1:`port` in the background, its output in `log_path`. The
    server writes to its own copy of the log's descriptor, so this process closes its own."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            **popen,
        )


def start_server(
    database_url: str,
    log_path: Path,
    *,
    ready_seconds: float = 30,
    nofile: int | None = None,
    **env: str,
) -> Server:
    """A real `asr serve` (uvicorn) on a free loopback port, ready when this returns (or
    RuntimeError after `ready_seconds`: a busy machine may need more than the default).
    `nofile` runs it under that descriptor limit (`ulimit -n`, soft and hard).

    The scheduler, the webhook deliverer and the retention pass are off unless `env` turns
    them on: they work across tenants, and on the shared test database a server's deliverer
    once took a contract test's outbox row from under it."""
    port = free_port()
    environment = {
        **os.environ,
        "ASR_DATABASE_URL": database_url,
        "ASR_BOOTSTRAP_DEFAULT_TENANT": "false",
        "ASR_LOG_LEVEL": "warning",
        "ASR_SCHEDULES_ENABLED": "false",
        "ASR_WEBHOOKS_ENABLED": "false",
        "ASR_RETENTION_INTERVAL_SECONDS": "0",
        **env,
    }

    def limit_descriptors() -> None:
        if nofile is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    process = spawn_server(
        port,
        environment,
        log_path,
        preexec_fn=limit_descriptors if nofile is not None else None,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log_path.read_text()}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return Server(base_url=base, process=process, log_path=log_path)
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become healthy in {ready_seconds} s")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="session")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(database_url, tmp_path_factory.mktemp("server") / "server.log")
    yield srv
    stop_server(srv)
    assert "Traceback" not in srv.log(), srv.log()[-4000:]


# ---------------------------------------------------------------- the slow tier

# What `pytest` leaves out by default (`addopts = "-m 'not slow'"` in pyproject.toml) and
# `pytest -m slow` runs (`pytest -m ""`: everything; `.ci/run` runs both tiers on SQLite and
# on PostgreSQL). Relative to tests/: a folder takes all its tests, a file all of its own, and
# `file::name` the test(s) whose id begins so (every parameter). A test module may also say
# `pytestmark = pytest.mark.slow` itself (e2e/test_slowloris_flood.py does). The default tier
# keeps at least one test of every feature; what moves here is what costs tens of seconds:
# other processes killed, stopped or restarted, several replicas, long or repeated runs.
SLOW = (
    # The tiers named so: fuzzing, browsers, faults, load.
    "e2e/test_schema_fuzz.py",  # schemathesis over the live schema, both tenants
    "browser/",  # Chromium through Playwright
    "faults/",  # two replicas behind a fault-injecting proxy, >= 1,000 keyed writes
    "load/",
    "e2e/test_load_r24.py",  # R24's load run
    # Properties: R1's state machine (hypothesis, ASR_R1_EXAMPLES x ASR_R1_STEPS).
    "properties/",
    # Servers killed, stopped or restarted mid-work, and the database lost.
    "e2e/test_run_durability.py",  # R5, R12: SIGKILL at random points, takeovers
    "e2e/test_graceful_shutdown.py",
    "e2e/test_read_replica.py",  # a primary and a streaming replica of its own, two servers
    "e2e/test_issue_17_database_outage.py::test_an_outage_is_a_503",
    # Two tenants written through every content path, one erased, every table scanned.
    "api/rest/test_erasure.py::test_erasing_a_tenant_leaves",
    "api/rest/test_erasure.py::test_retention_erases_an_idle_session",
    "e2e/test_memory.py::test_r6_kill_during_save_and_compact",
    "e2e/test_processes.py::test_restart_and_crash_while_processes_run_report_them_restored",
    "e2e/test_client.py::test_session_stream_comes_back_after_a_shutdown_frame",
    "sse/test_shutdown.py",  # R7: SIGTERM with a run and 20 subscribers
    "sse/test_ag_ui_shutdown.py",
    # Several replicas, or many writers, at once.
    "e2e/test_schedules_replicas.py",
    "e2e/test_retention_replicas.py",
    "e2e/test_ag_ui_servers.py",
    "e2e/test_ag_ui_node.py",  # Node (the official AG-UI client, CopilotKit) on two replicas
    "e2e/test_mcp_servers.py",  # the MCP server on two replicas, the example against one
    "e2e/test_a2a_servers.py",
    "e2e/test_concurrent_writers.py",
    "e2e/test_runs.py::test_r4_ten_concurrent_runs_across_two_replicas",
    "e2e/test_http_server.py::test_r3_optimistic_writers_with_expected_seq",
    "e2e/test_issue_16_run_control.py",  # run control across two replicas
    "sse/test_issue_17_revocation.py",  # revoked keys end streams on every replica
    # Clients that stall until the server gives up on them (R14; a stream open for seconds).
    "sse/test_slow_clients.py",
    "e2e/test_issue_17_slowloris.py::test_keep_alive_and_a_stream_outlive_the_header_timeout",
    # MCP calls that wait for progress heartbeats and cancellations (seconds each).
    "api/mcp/test_server.py::test_tools_call_continue_and_progress",
    "api/mcp/test_server.py::test_a_cancelled_call_interrupts_its_run_in_both_eras",
    # Long single runs: a fresh venv and pip install; every provider profile end to end;
    # TLS to the database in each of its spellings.
    "clients/test_python_package.py::test_pip_install_in_a_fresh_venv",
    "e2e/test_redaction.py::test_issue_19_credentials_of_every_profile_leak_nowhere",
    "e2e/test_runs.py::test_openai_errors_fail_the_run_without_leaking_the_key",  # retries
    "e2e/test_issue_17_tls_url.py::test_tls_parameters_work_for_the_pool_and_for_listen",
)


def _is_slow(test_id: str) -> bool:
    path = test_id.split("::", 1)[0]
    for slow in SLOW:
        if slow.endswith("/"):
            if path.startswith(slow):
                return True
        elif "::" in slow:
            if test_id.startswith(slow):
                return True
        elif path == slow:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).resolve().parent
    for item in items:
        try:
            relative = item.path.resolve().relative_to(tests_root).as_posix()
        except ValueError:
            continue
        test_id = (
            relative + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else relative
        )
        if _is_slow(test_id):
            item.add_marker(pytest.mark.slow)
