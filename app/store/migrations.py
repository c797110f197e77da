"""Run Alembic from code (`asr migrate`, `asr serve` on SQLite, the tests).

The migration scripts live in the repository's `migrations/` folder next to `alembic.ini`.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_head(database_url: str) -> None:
    """`alembic upgrade head` on `database_url`. Must not run inside an event loop."""
    command.upgrade(alembic_config(database_url), "head")


def downgrade_base(database_url: str) -> None:
    command.downgrade(alembic_config(database_url), "base")


def script_revisions() -> tuple[str, frozenset[str]]:
    """(head, every revision) of the migration scripts this code ships.

    Read from disk with no database I/O; the app reads it once at start and compares the
    database's revision with it on every readiness probe.
    """
    script = ScriptDirectory.from_config(alembic_config("sqlite+aiosqlite://"))
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {heads}")
    known = frozenset(rev.revision for rev in script.walk_revisions())
    return heads[0], known
