"""A throwaway PostgreSQL cluster of the fault tests' own, on a free loopback port.

The fault tests restart PostgreSQL, which must not disturb the shared server at
127.0.0.1:5432 that the rest of the suite uses; so they `initdb` a cluster into a temporary
folder, with trust authentication and a listener on 127.0.0.1 only. initdb and postgres
refuse to run as root: as root every command runs as the `postgres` system user
(`runuser`), and the folder belongs to that user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from tests.pgroles import Roles, make_roles

BINARIES = ("initdb", "pg_ctl", "postgres")

CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 200
fsync = off
full_page_writes = off
shared_buffers = 64MB
logging_collector = off
"""


def find_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb, pg_ctl and postgres."""
    found = [
        d
        for d in Path("/usr/lib/postgresql").glob("*/bin")
        if all((d / name).exists() for name in BINARIES)
    ]
    return max(found, key=lambda d: int(d.parent.name)) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres() -> list[str]:
    """The prefix that runs a command as the cluster's owner (ourselves unless root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class PgCluster:
    bin_dir: Path
    root: Path  # the temporary folder: data/, sockets/, postgres.log
    port: int
    restarts: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        """The superuser's SQLAlchemy URL of `database`."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str, timeout: float = 90) -> None:
        command = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path)]
        subprocess.run(
            [*_as_postgres(), *command, "-w", "-t", "60", *args],
            check=True,
            capture_output=True,
            timeout=timeout,
        )

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: open transactions are rolled back, clients cut off."""
        self._pg_ctl("-m", "fast", "restart")
        self.restarts += 1

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._pg_ctl("-m", "immediate", "stop", timeout=30)

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def create_cluster(bin_dir: Path) -> PgCluster:
    """initdb into a fresh temporary folder and start the server; it accepts when this returns.

    The folder is made directly under the system temp dir (not pytest's, which is private
    to root) so that the `postgres` user can reach it.
    """
    root = Path(tempfile.mkdtemp(prefix="asr-faults-pg-"))
    cluster = PgCluster(bin_dir=bin_dir, root=root, port=_free_port())
    (root / "sockets").mkdir()
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (root, root / "sockets"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    try:
        subprocess.run(
            [
                *_as_postgres(),
                *(str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", "postgres"),
                *("-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write(CONF.format(port=cluster.port, sockets=root / "sockets"))
        cluster.start()
    except BaseException:
        remove_cluster(cluster)
        raise
    return cluster


def remove_cluster(cluster: PgCluster) -> None:
    """Stop the server (immediately: nothing in it is kept) and delete its folder."""
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)


async def _execute(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(cluster: PgCluster, name: str) -> Roles:
    """A fresh database with the owner and app roles of deploy/postgres/roles.sql, migrated
    as the owner (as CI's PostgreSQL tier does); the replicas connect as the app role.

    Blocking (psql, Alembic): call it through `asyncio.to_thread` from a test."""
    asyncio.run(_execute(Roles.dsn(cluster.url()), f'CREATE DATABASE "{name}"'))
    return make_roles(cluster.url(name))
