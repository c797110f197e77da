"""Throwaway PostgreSQL clusters: initdb + pg_ctl from the server binaries, on a free
loopback port, in a temporary folder, so that stopping one (or turning TLS on) harms no
other test.

initdb refuses to run as root: as root, the cluster belongs to the `postgres` system user
(`runuser -u postgres --`). Without the binaries or that user, `throwaway_cluster` skips the
test -- or fails it, when `required` (under CI=true, where the binaries must be there).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port


def pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


class ThrowawayPostgres:
    """A PostgreSQL cluster of our own. With `tls`, it has a self-signed certificate for
    127.0.0.1 (`cert_path`) and refuses every TCP connection that is not TLS."""

    def __init__(self, root: Path, *, tls: bool = False) -> None:
        self.root = root
        self.data = root / "data"
        self.tls = tls
        self.cert_path = root / "server.crt"
        self.key_path = root / "server.key"
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)

    def init(self) -> None:
        initdb = pg_bin("initdb")
        assert initdb is not None
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        if self.tls:
            self._make_certificate()
            # Only TLS over TCP: a connection that does not use it is refused, so a test that
            # connects at all has shown that TLS was used.
            (self.data / "pg_hba.conf").write_text(
                "local all all trust\n"
                "hostssl all all 127.0.0.1/32 trust\n"
                "hostnossl all all 127.0.0.1/32 reject\n"
            )

    def _make_certificate(self) -> None:
        self._run(
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(self.key_path),
            "-out",
            str(self.cert_path),
        )
        self.key_path.chmod(0o600)

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c full_page_writes=off"
        )
        if self.tls:
            options += f" -c ssl=on -c ssl_cert_file={self.cert_path}"
            options += f" -c ssl_key_file={self.key_path}"
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        log = str(self.root / "postgres.log")
        self._run(pg_ctl, "-D", str(self.data), "-o", options, "-l", log, "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        self._run(pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")


@contextlib.contextmanager
def throwaway_cluster(*, tls: bool = False, required: bool = False) -> Iterator[ThrowawayPostgres]:
    """A started cluster, stopped and removed afterwards."""
    missing = _missing(tls=tls)
    if missing is not None:
        if required:
            pytest.fail(f"{missing} (required under CI=true)")
        pytest.skip(missing)
    root = Path(tempfile.mkdtemp(prefix="asr-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    cluster = ThrowawayPostgres(root, tls=tls)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def streaming_replica(primary: ThrowawayPostgres) -> ThrowawayPostgres:
    """A hot standby of `primary` in a temporary folder of its own, streaming from it
    (`pg_basebackup -R -X stream`), started. The caller stops it and removes `root`."""
    tool = pg_bin("pg_basebackup")
    assert tool is not None
    root = Path(tempfile.mkdtemp(prefix="asr-pg-replica-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    replica = ThrowawayPostgres(root)
    primary._run(
        tool,
        *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
        *("-D", str(replica.data), "-R", "-X", "stream", "--no-sync"),
    )
    replica.start()
    return replica


def _missing(*, tls: bool) -> str | None:
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not installed"
    if tls and shutil.which("openssl") is None:
        return "openssl not installed (for the test certificate)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user for initdb"
    return None
