"""The `asr` command: serve, migrate, tenant create, key create / list / revoke."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from app.runtime.accounts import Accounts, key_listing
from app.runtime.errors import AgentSessionError
from app.settings import Settings
from app.store.engine import make_engine, redacted_url
from app.store.migrations import upgrade_head
from app.store.store import AgentSessionStore


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asr", description="Agent Session Runtime")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)

    sub.add_parser("migrate", help="alembic upgrade head on ASR_DATABASE_URL")

    tenant = sub.add_parser("tenant", help="tenants").add_subparsers(dest="action", required=True)
    tenant.add_parser("create", help="create a tenant").add_argument("name")

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
    return parser


def _with_accounts(settings: Settings, action: Callable[[Accounts], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        engine = make_engine(settings)
        try:
            return await action(Accounts(AgentSessionStore(engine)))
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
    if args.command == "migrate":
        upgrade_head(settings.database_url)
        print(f"migrated {redacted_url(settings.database_url)} to head")
        return 0
    if args.command == "serve":
        return _serve(settings, args.host, args.port)
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


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    import uvicorn

    from app.main import configure_logging, create_app

    configure_logging(settings.log_level)
    if settings.is_sqlite:
        # The embedded default needs no separate step: bring the file to head on start.
        upgrade_head(settings.database_url)
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=port if port is not None else settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=20,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
