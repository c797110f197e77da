"""A PgBouncer of our own, in transaction pooling mode, on a free loopback port.

Used by `tests/e2e/test_pgbouncer.py` and by `.ci/run`'s PgBouncer tier:

    python -m tests.pgbouncer start DIR [--upstream-port 5432]   # prints the port
    python -m tests.pgbouncer stop DIR

PgBouncer refuses to run as root, so as root it runs as the `postgres` system user. It
trusts every client (loopback only) and forwards every database name to the upstream
server, so the test harness can create and drop its per-run databases through it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CONFIG = """\
[databases]
* = host=127.0.0.1 port={upstream_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {root}/userlist.txt
pool_mode = transaction
max_client_conn = 400
default_pool_size = 30
ignore_startup_parameters = extra_float_digits
logfile = {root}/pgbouncer.log
pidfile = {root}/pgbouncer.pid
"""


def binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    root: Path,
    *,
    upstream_port: int = 5432,
    users: tuple[str, ...] = ("postgres",),
    timeout: float = 15,
) -> int:
    """Start PgBouncer with its files in `root`; returns the port once it accepts.

    `users` may connect through it (trust auth still wants each name in its auth_file): the
    suite's PostgreSQL tier connects as a non-owner app role (ASR_TEST_DB_ROLES)."""
    exe = binary()
    if exe is None:
        raise RuntimeError("pgbouncer is not installed (Debian package `pgbouncer`)")
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    (root / "pgbouncer.ini").write_text(
        CONFIG.format(upstream_port=upstream_port, port=port, root=root)
    )
    (root / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in users))
    command = [exe, "-d", str(root / "pgbouncer.ini")]
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for path in (root, *root.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        command = [exe, "-d", "-u", "postgres", str(root / "pgbouncer.ini")]
    subprocess.run(command, check=True, capture_output=True, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return port
        time.sleep(0.1)
    stop(root)
    log = (root / "pgbouncer.log").read_text()
    raise RuntimeError(f"pgbouncer did not listen on {port}: {log}")


def stop(root: Path, *, timeout: float = 10) -> None:
    """Stop the PgBouncer whose pidfile is in `root` (no-op when none runs)."""
    pidfile = root / "pgbouncer.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text().strip())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pgbouncer")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--upstream-port", type=int, default=5432)
    args = parser.parse_args(argv)
    if args.action == "start":
        print(start(args.dir.resolve(), upstream_port=args.upstream_port))
    else:
        stop(args.dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
