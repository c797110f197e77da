"""The `asr` command, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ROOT, free_port


def asr(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASR_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_tenant_and_key_commands(database_url: str) -> None:
    name = f"cli-{os.getpid()}-{time.time_ns()}"
    created = asr(database_url, "tenant", "create", name)
    assert created.returncode == 0, created.stderr
    again = asr(database_url, "tenant", "create", name)
    assert again.returncode == 1 and "already exists" in again.stderr
    key = asr(database_url, "key", "create", "--tenant", name)
    assert key.returncode == 0, key.stderr
    raw = key.stdout.strip().splitlines()[-1]
    assert raw.startswith("asr_")
    listing = asr(database_url, "key", "list", "--tenant", name)
    assert raw.split("_")[1] in listing.stdout and raw not in listing.stdout
    rotated = asr(database_url, "key", "rotate", "--tenant", name, raw)
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip().splitlines()[-1]
    assert new.startswith("asr_") and new != raw
    assert asr(database_url, "key", "revoke", raw).returncode == 1  # rotation revoked it
    assert asr(database_url, "key", "revoke", new).returncode == 0
    missing = asr(database_url, "key", "create", "--tenant", "no-such-tenant")
    assert missing.returncode == 1 and "not found" in missing.stderr


def readme_curls() -> list[str]:
    """The quick start's curl commands, as the README writes them (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    quick_start = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", quick_start, re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [line for line in lines if line.startswith("curl ")]


def test_first_start_on_sqlite_migrates_and_prints_a_usable_key(tmp_path: Path) -> None:
    """The README's first command, in an empty folder: `asr serve` on the default SQLite file;
    then the quick start's curl commands as written (with this server's port), if curl is
    installed."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASR_")}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        key = next(line for line in log.read_text().splitlines() if line.startswith("asr_"))
        headers = {"Authorization": f"Bearer {key}"}
        created = httpx.post(base + "/v1/sessions", json={}, headers=headers)
        assert created.status_code == 201
        assert (tmp_path / "asr.db").exists()
        curls = readme_curls()
        assert len(curls) == 3, curls  # create a session, run the model, stream a run
        if shutil.which("curl") is None:
            return
        outputs = [
            subprocess.run(
                ["bash", "-c", command.replace("localhost:8000", f"127.0.0.1:{port}")],
                env={**env, "KEY": key},
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            for command in curls
        ]
        assert json.loads(outputs[0])["session_id"] == "demo"
        ran = json.loads(outputs[1])
        assert (ran["stop_reason"], ran["output"]) == ("COMPLETED", "echo: hello")
        assert "event: delta" in outputs[2] and "event: RUN_FINISHED" in outputs[2]
    finally:
        process.terminate()
        process.wait(timeout=15)
