"""A live `asr serve` on SQLite for what runs outside pytest against a real server: the
TypeScript client's tests and type-drift check, and the examples (`.ci/run`).

    python -m tests.live_server start DIR [--cors-origin URL]   # prints: URL KEY
    python -m tests.live_server stop DIR

`start` migrates a fresh SQLite file in DIR, creates a tenant and a key with the `asr` CLI
(as an operator would), starts the server on a free loopback port in the background, waits
until it answers and prints its URL and the key. `stop` ends it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ROOT, free_port, spawn_server

STARTUP_SECONDS = 30


def _asr(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def start(root: Path, *, cors_origin: str | None = None) -> tuple[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ASR_DATABASE_URL": f"sqlite+aiosqlite:///{root / 'live.db'}",
        "ASR_BOOTSTRAP_DEFAULT_TENANT": "false",
        "ASR_LOG_LEVEL": "warning",
        **({"ASR_CORS_ORIGINS": cors_origin} if cors_origin else {}),
    }
    _asr(env, "migrate")
    _asr(env, "tenant", "create", "live")
    key = _asr(env, "key", "create", "--tenant", "live").strip().splitlines()[-1]
    port = free_port()
    process = spawn_server(port, env, root / "server.log", start_new_session=True)
    (root / "server.pid").write_text(str(process.pid))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited:\n{(root / 'server.log').read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return url, key
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(root)
    raise SystemExit("the server did not answer in time")


def stop(root: Path) -> None:
    pid_file = root / "server.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    pid_file.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(150):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.live_server")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--cors-origin")
    args = parser.parse_args()
    if args.action == "start":
        url, key = start(args.root, cors_origin=args.cors_origin)
        print(url, key)
    else:
        stop(args.root)


if __name__ == "__main__":
    main()
