"""PostgreSQL set up as docs/how-to/security.md says: an owner role and an app role.

`deploy/postgres/roles.sql` (the operators' script, run here as written) makes both in a
fresh database; migrations run as the owner; the service connects as the app role, which
owns nothing, is no superuser and cannot bypass the row-level policies.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from app.store.migrations import upgrade_head

ROLES_SQL = Path(__file__).resolve().parents[1] / "deploy" / "postgres" / "roles.sql"


@dataclass(frozen=True)
class Roles:
    owner: str
    app: str
    owner_url: str  # SQLAlchemy URLs
    app_url: str

    @staticmethod
    def dsn(url: str) -> str:
        """The asyncpg DSN of a SQLAlchemy URL."""
        return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def psql(url: str, *args: str) -> None:
    u = make_url(url)
    subprocess.run(
        [
            *("psql", "-X", "-q", "-h", u.host or "127.0.0.1", "-p", str(u.port or 5432)),
            *("-U", u.username or "postgres", "-d", u.database or "postgres", *args),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


def make_roles(admin_url: str) -> Roles:
    """Run roles.sql on the fresh database of `admin_url` (a superuser's), then migrate."""
    tag = uuid.uuid4().hex[:8]
    owner, app = f"asr_owner_{tag}", f"asr_app_{tag}"
    psql(admin_url, "-v", f"owner_role={owner}", "-v", f"app_role={app}", "-f", str(ROLES_SQL))
    base = make_url(admin_url)
    roles = Roles(
        owner=owner,
        app=app,
        owner_url=base.set(username=owner).render_as_string(hide_password=False),
        app_url=base.set(username=app).render_as_string(hide_password=False),
    )
    upgrade_head(roles.owner_url)
    return roles


def drop_roles(admin_url: str, roles: Roles) -> None:
    """After the database is dropped: nothing else refers to the roles."""
    maintenance = make_url(admin_url).set(database="postgres")
    psql(
        maintenance.render_as_string(hide_password=False),
        "-c",
        f'DROP ROLE IF EXISTS "{roles.app}"; DROP ROLE IF EXISTS "{roles.owner}";',
    )
