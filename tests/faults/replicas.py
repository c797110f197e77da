"""`asr serve` replicas that can be killed with SIGKILL and started again on the same port.

Each replica keeps its port across restarts, so clients keep their base URL and simply get
connection errors while it is down, as they would behind a fixed address. Tenants and keys
are made with the `asr` CLI, as an operator would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]

# Settings every replica of the fault tests runs with: small pools (two replicas and the
# harness share 2 cores), no rate caps in the way of a burst, short run leases (a run whose
# replica was killed is interrupted in ~3 s instead of 30, so its session frees up while
# the writers still retry).
REPLICA_ENV = {
    "ASR_BOOTSTRAP_DEFAULT_TENANT": "false",
    "ASR_LOG_LEVEL": "warning",
    "ASR_DB_POOL_SIZE": "8",
    "ASR_DB_MAX_OVERFLOW": "4",
    "ASR_MAX_RUNS_PER_MINUTE": "100000",
    "ASR_MAX_LIVE_RUNS_PER_TENANT": "1000",
    "ASR_RUN_LEASE_SECONDS": "3",
    "ASR_RUN_SWEEP_SECONDS": "0.5",
    "ASR_GRACEFUL_SHUTDOWN_SECONDS": "2",
}


@dataclass
class Replica:
    name: str
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    kills: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self) -> subprocess.Popen[bytes]:
        environment = {**os.environ, **REPLICA_ENV, **self.env}
        command = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1"]
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            log.flush()
            return subprocess.Popen(
                [*command, "--port", str(self.port)],
                cwd=ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def start(self, *, within: float = 60) -> None:
        """Start `asr serve` on this replica's port; returns once /healthz answers 200."""
        self.process = self._spawn()
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as probe:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"replica {self.name} exited: {self.log_tail()}")
                try:
                    if (await probe.get("/healthz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        self.process.kill()
        raise RuntimeError(f"replica {self.name} not healthy in {within} s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, whatever it was doing stops mid-way."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.kills += 1

    async def restart(self) -> None:
        """kill -9, then start again at once on the same port."""
        self.kill()
        await self.start()

    def stop(self) -> None:
        """Graceful stop at the end of a test (SIGTERM, then SIGKILL after 15 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


async def start_all(replicas: list[Replica]) -> None:
    """Start the replicas side by side; every start has ended (and so every process is
    known, for the caller's cleanup) before a failure is raised."""
    results = await asyncio.gather(*(r.start() for r in replicas), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def asr_cli(database_url: str, *args: str) -> str:
    """Run `asr ARGS` against `database_url`; returns its standard output."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**os.environ, "ASR_DATABASE_URL": database_url, "ASR_LOG_LEVEL": "warning"},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout


def make_api_key(database_url: str) -> str:
    """A new tenant and its API key, through `asr tenant create` and `asr key create`.

    Blocking: call it through `asyncio.to_thread` from a test."""
    name = f"faults-{uuid.uuid4().hex[:10]}"
    asr_cli(database_url, "tenant", "create", name)
    return asr_cli(database_url, "key", "create", "--tenant", name).strip().splitlines()[-1]
