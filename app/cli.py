"""The `asr` command: serve, migrate, tenants, keys, sessions, schedules, retention.

Argument parsing and dispatch only; the session and retention verbs live in `app.admin`,
the schedule verbs in `app.schedule_admin`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from app import admin, schedule_admin
from app.runtime.access.accounts import Accounts, key_listing
from app.runtime.errors import AgentSessionError
from app.runtime.runs.blueprints import BlueprintError, Blueprints, load_blueprints
from app.runtime.schedules.service import MISSED_POLICIES, MULTITASK_POLICIES, ScheduleSpec
from app.runtime.session.retention import RetentionPolicy
from app.settings import Settings
from app.store.engine import make_engine, redacted_url
from app.store.migrations import upgrade_head
from app.store.stores import open_stores


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asr", description="Agent Session Runtime")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes, each a full replica on the shared port (default ASR_WORKERS, 1; "
        "PostgreSQL only)",
    )

    sub.add_parser("migrate", help="alembic upgrade head on ASR_DATABASE_URL")

    tenant = sub.add_parser("tenant", help="tenants").add_subparsers(dest="action", required=True)
    tenant.add_parser("create", help="create a tenant").add_argument("name")
    tenant.add_parser("list", help="list tenants (JSON lines)")
    erase = tenant.add_parser(
        "erase", help="erase a tenant: every session, key, subscription, schedule and file"
    )
    erase.add_argument("name")
    erase.add_argument("--by", default="cli", help="who asked, for the receipt (no content)")
    erasures = tenant.add_parser("erasures", help="a tenant's erasure receipts (JSON lines)")
    erasures.add_argument("tenant_id", help="the tenant's id (its name is gone with it)")
    erasures.add_argument("--limit", type=int, default=100)

    key = sub.add_parser("key", help="API keys").add_subparsers(dest="action", required=True)
    create = key.add_parser("create", help="create a key; prints it on the last line")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", default="default")
    listing = key.add_parser("list", help="list a tenant's keys (prefix and name only)")
    listing.add_argument("--tenant", required=True)
    key.add_parser("revoke", help="revoke a key").add_argument("key", help="the key or its prefix")
    rotate = key.add_parser("rotate", help="new key, old one revoked; prints it on the last line")
    rotate.add_argument("--tenant", required=True)
    rotate.add_argument("key", help="the old key or its prefix")
    _sessions_parser(sub)
    _schedules_parser(sub)
    retention = sub.add_parser("retention", help="retention policy").add_subparsers(
        dest="action", required=True
    )
    run = retention.add_parser("run", help="erase idle sessions and prune old snapshots once")
    run.add_argument("--idle-days", type=int, default=None, help="default ASR_RETENTION_IDLE_DAYS")
    run.add_argument(
        "--keep-snapshots", type=int, default=None, help="default ASR_RETENTION_KEEP_SNAPSHOTS"
    )
    run.add_argument("--dry-run", action="store_true", help="list what would be removed")
    run.add_argument("--tenant", default=None, help="only this tenant (default: all)")
    show = retention.add_parser("show", help="a tenant's retention policy (JSON)")
    show.add_argument("--tenant", required=True)
    put = retention.add_parser(
        "set", help="set a tenant's retention policy (what is not given stays)"
    )
    put.add_argument("--tenant", required=True)
    idle = put.add_mutually_exclusive_group()
    idle.add_argument(
        "--idle-days", type=_positive, default=None, help="delete sessions idle this long"
    )
    idle.add_argument("--no-idle", action="store_true", help="never delete for idleness")
    prune = put.add_mutually_exclusive_group()
    prune.add_argument("--prune", dest="prune", action="store_true", default=None)
    prune.add_argument("--no-prune", dest="prune", action="store_false")
    put.add_argument(
        "--prune-min-events",
        type=_positive,
        default=None,
        help="prune when this many events would go",
    )
    return parser


def _positive(text: str) -> int:
    """A count of at least 1 that the policy's 32-bit columns hold."""
    value = int(text)
    if not 1 <= value <= 100_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 100000000")
    return value


def _sessions_parser(sub: Any) -> None:
    verbs = sub.add_parser("sessions", help="inspect, export and import sessions")
    actions = verbs.add_subparsers(dest="action", required=True)

    def verb(name: str, help_text: str, *, with_id: bool = True) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--tenant", required=True, help="tenant name")
        if with_id:
            parser.add_argument("session_id")
        return parser

    listing = verb("list", "sessions, newest first (JSON lines)", with_id=False)
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--status", default=None)
    verb("show", "one session: row and state summary (JSON)")
    events = verb("events", "events of a session (JSON lines)")
    events.add_argument("--after-seq", type=int, default=0)
    events.add_argument("--limit", type=int, default=None)
    events.add_argument("--types", default=None, help="comma-separated event types")
    tail = verb("tail", "print events as they are committed (polls)")
    tail.add_argument("--after-seq", type=int, default=0)
    tail.add_argument("--interval", type=float, default=1.0)
    tail.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    export = verb("export", "the session's ledger as JSON lines (header + events)")
    export.add_argument("-o", "--output", default="-", help="file, or - for stdout")
    importing = verb("import", "a new session from an export", with_id=False)
    importing.add_argument("file", help="export file, or - for stdin")
    importing.add_argument("--session-id", default=None, help="id of the new session")


def _schedules_parser(sub: Any) -> None:
    verbs = sub.add_parser("schedules", help="schedules: runs on a cron expression or interval")
    actions = verbs.add_subparsers(dest="action", required=True)

    def verb(name: str, help_text: str, *, with_id: bool = True) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--tenant", required=True, help="tenant name")
        if with_id:
            parser.add_argument("schedule_id")
        return parser

    verb("list", "schedules, newest first (JSON lines)", with_id=False).add_argument(
        "--limit", type=int, default=100
    )
    verb("show", "one schedule (JSON)")
    create = verb("create", "create a schedule; prints it (JSON)", with_id=False)
    target = create.add_mutually_exclusive_group(required=True)
    target.add_argument("--session", help="run on this session")
    target.add_argument("--agent", help="run each tick on a new session from this blueprint")
    cadence = create.add_mutually_exclusive_group(required=True)
    cadence.add_argument("--cron", help="five fields: minute hour day month weekday")
    cadence.add_argument("--every", type=int, metavar="SECONDS", help="a tick every N seconds")
    create.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in")
    create.add_argument("--input", default=None, help="the input each tick's run gets")
    create.add_argument("--missed", choices=MISSED_POLICIES, default="skip")
    create.add_argument("--multitask", choices=MULTITASK_POLICIES, default="skip")
    create.add_argument("--paused", action="store_true", help="create it paused")
    verb("pause", "pause a schedule")
    verb("resume", "resume a paused schedule")
    verb("delete", "delete a schedule (the runs it started stay)")
    runs = verb("runs", "what the schedule's ticks did: runs started, ticks skipped")
    runs.add_argument("--limit", type=int, default=100)


def _with_accounts(settings: Settings, action: Callable[[Accounts], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        engine = make_engine(settings)
        try:
            return await action(Accounts(open_stores(engine).accounts))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings()
    try:
        return _dispatch(args, settings)
    except AgentSessionError as exc:
        print(f"asr: {exc.detail or exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "sessions":
        return asyncio.run(_sessions(args, settings))
    if args.command == "schedules":
        return asyncio.run(_schedules(args, settings))
    if args.command == "retention":
        return asyncio.run(_retention(args, settings))
    if args.command == "tenant" and args.action == "list":
        return asyncio.run(_tenant_list(settings))
    if args.command == "tenant" and args.action in ("erase", "erasures"):
        return asyncio.run(_tenant_erasure(args, settings))
    if args.command == "migrate":
        # Through the direct URL: DDL and Alembic's version row do not belong behind PgBouncer.
        upgrade_head(settings.direct_url)
        print(f"migrated {redacted_url(settings.direct_url)} to head")
        return 0
    if args.command == "serve":
        return _serve(settings, args.host, args.port, args.workers or settings.workers)
    if args.command == "tenant":
        tenant = _with_accounts(settings, lambda a: a.create_tenant(args.name))
        print(f"created tenant {tenant.name} ({tenant.tenant_id})")
        return 0
    if args.action == "create":
        raw, record = _with_accounts(settings, lambda a: a.create_key(args.tenant, name=args.name))
        print(f"created key {record.prefix} ({record.name}) for tenant {args.tenant}; shown once:")
        print(raw)
        return 0
    if args.action == "rotate":
        raw, record = _with_accounts(settings, lambda a: a.rotate_key(args.tenant, args.key))
        print(f"rotated: new key {record.prefix} for tenant {args.tenant}; the old one is revoked:")
        print(raw)
        return 0
    if args.action == "list":
        for record in _with_accounts(settings, lambda a: a.list_keys(args.tenant)):
            print(key_listing(record))
        return 0
    _with_accounts(settings, lambda a: a.revoke_key(args.key))
    print("revoked")
    return 0


async def _tenant_list(settings: Settings) -> int:
    async with admin.toolkit(settings) as kit:
        await admin.list_tenants(kit, sys.stdout)
    return 0


async def _tenant_erasure(args: argparse.Namespace, settings: Settings) -> int:
    async with admin.toolkit(settings) as kit:
        if args.action == "erase":
            await admin.erase_tenant(
                kit, sys.stdout, tenant=args.name, requested_by=f"cli:{args.by}"
            )
        else:
            await admin.list_erasures(kit, sys.stdout, tenant_id=args.tenant_id, limit=args.limit)
    return 0


async def _sessions(args: argparse.Namespace, settings: Settings) -> int:
    out = sys.stdout
    async with admin.toolkit(settings) as kit:
        if args.action == "list":
            await admin.list_sessions(
                kit, out, tenant=args.tenant, limit=args.limit, status=args.status
            )
        elif args.action == "show":
            await admin.show_session(kit, out, tenant=args.tenant, session_id=args.session_id)
        elif args.action == "events":
            types = [t for t in (args.types or "").split(",") if t] or None
            await admin.print_events(
                kit,
                out,
                tenant=args.tenant,
                session_id=args.session_id,
                after_seq=args.after_seq,
                limit=args.limit,
                types=types,
            )
        elif args.action == "tail":
            await admin.tail_events(
                kit,
                out,
                tenant=args.tenant,
                session_id=args.session_id,
                after_seq=args.after_seq,
                interval=args.interval,
                max_seconds=args.max_seconds,
            )
        elif args.action == "export":
            with _open_out(args.output) as target:
                count = await admin.export_session(
                    kit, target, tenant=args.tenant, session_id=args.session_id
                )
            print(f"exported {count} events of {args.session_id}", file=sys.stderr)
        else:
            with _open_in(args.file) as source:
                record = await admin.import_session(
                    kit, source, tenant=args.tenant, session_id=args.session_id
                )
            print(f"imported {record.last_seq} events as session:", file=sys.stderr)
            print(record.session_id)
    return 0


async def _schedules(args: argparse.Namespace, settings: Settings) -> int:
    out = sys.stdout
    async with admin.toolkit(settings) as kit:
        if args.action == "list":
            await schedule_admin.list_schedules(kit, out, tenant=args.tenant, limit=args.limit)
        elif args.action == "show":
            await schedule_admin.show_schedule(
                kit, out, tenant=args.tenant, schedule_id=args.schedule_id
            )
        elif args.action == "create":
            spec = ScheduleSpec(
                session_id=args.session,
                agent_name=args.agent,
                input=args.input,
                cron=args.cron,
                timezone=args.timezone,
                interval_seconds=args.every,
                missed=args.missed,
                multitask=args.multitask,
                paused=args.paused,
            )
            blueprints = _blueprints(settings) if args.agent else None
            await schedule_admin.create_schedule(
                kit, out, tenant=args.tenant, spec=spec, blueprints=blueprints
            )
        elif args.action == "runs":
            await schedule_admin.list_fires(
                kit, out, tenant=args.tenant, schedule_id=args.schedule_id, limit=args.limit
            )
        else:
            await schedule_admin.change_schedule(
                kit, out, tenant=args.tenant, schedule_id=args.schedule_id, action=args.action
            )
    return 0


def _blueprints(settings: Settings) -> Blueprints:
    """The agents file's blueprints, checked as the server checks them."""
    from app.assembly import build_models, known_tool_names

    return load_blueprints(
        settings.agents_file,
        known_tools=known_tool_names(settings),
        known_profiles=build_models(settings).names(),
    )


async def _retention(args: argparse.Namespace, settings: Settings) -> int:
    if args.action in ("show", "set"):
        from app.assembly import retention_defaults

        defaults = retention_defaults(settings)
        async with admin.toolkit(settings) as kit:
            if args.action == "show":
                await admin.show_retention(kit, sys.stdout, tenant=args.tenant, defaults=defaults)
                return 0
            changes: dict[str, Any] = {}
            if args.no_idle or args.idle_days is not None:
                changes["idle_days"] = None if args.no_idle else args.idle_days
            if args.prune is not None:
                changes["prune"] = args.prune
            if args.prune_min_events is not None:
                changes["prune_min_events"] = args.prune_min_events
            await admin.set_retention(
                kit, sys.stdout, tenant=args.tenant, defaults=defaults, changes=changes
            )
        return 0
    idle = args.idle_days if args.idle_days is not None else settings.retention_idle_days
    keep = args.keep_snapshots or settings.retention_keep_snapshots
    policy = RetentionPolicy(
        idle_days=idle,
        keep_snapshots=keep,
        webhook_log_days=settings.retention_webhook_log_days,
    )
    async with admin.toolkit(settings) as kit:
        await admin.run_retention(
            kit, sys.stdout, policy=policy, dry_run=args.dry_run, tenant=args.tenant
        )
    return 0


@contextmanager
def _open_out(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as handle:
        yield handle


@contextmanager
def _open_in(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdin
        return
    with open(path, encoding="utf-8") as handle:
        yield handle


def _serve(settings: Settings, host: str | None, port: int | None, workers: int = 1) -> int:
    from app.assembly import build_models, known_tool_names
    from app.logs import configure_logging
    from app.runtime.models.file import read_models_file
    from app.runtime.models.profiles import ProfileError
    from app.runtime.tools.mcp.config import McpConfigError, parse_servers
    from app.serving import Workers, build_server, prepare_workers

    configure_logging(settings.log_level, settings.log_format)
    try:
        models = build_models(settings)
        servers = parse_servers(
            {**read_models_file(settings.models_file).mcp_servers, **settings.mcp_servers}
        )
    except (ProfileError, McpConfigError) as exc:
        print(f"asr: invalid models file or settings:\n{exc}", file=sys.stderr)
        return 2
    try:
        # The app validates the file again at start; here a bad file gets a plain message.
        load_blueprints(
            settings.agents_file,
            known_tools=[*known_tool_names(settings), *(f"{n}__*" for n in servers)],
            known_profiles=models.names(),
        )
    except BlueprintError as exc:
        print(f"asr: invalid ASR_AGENTS_FILE:\n{exc}", file=sys.stderr)
        return 2
    if workers > 1:
        refusal = prepare_workers(settings)
        if refusal is not None:
            print(f"asr: {refusal}", file=sys.stderr)
            return 2
    if settings.is_sqlite:
        # The embedded default needs no separate step: bring the file to head on start.
        upgrade_head(settings.database_url)
    if workers == 1:
        build_server(settings, host, port).run()
        return 0
    if settings.bootstrap_default_tenant:
        # Once, here: N workers racing to create `default` would fail all but one.
        key = _with_accounts(settings, lambda a: a.bootstrap())
        if key is not None:
            print("Created tenant 'default'. Its API key (shown once):", flush=True)
            print(key, flush=True)
        os.environ["ASR_BOOTSTRAP_DEFAULT_TENANT"] = "false"
    return Workers(settings, workers, host, port).run()


if __name__ == "__main__":
    sys.exit(main())
