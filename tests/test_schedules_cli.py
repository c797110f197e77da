"""`asr schedules ...`, run as an operator runs it (a subprocess): create (and a refused cron
expression, named on stderr), pause, list, runs, delete."""

from __future__ import annotations

import json

import httpx

from tests.conftest import TenantKey
from tests.test_cli import asr


async def test_schedules_commands(
    database_url: str, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    made = asr(
        database_url,
        *("schedules", "create", "--tenant", tenant.name, "--session", sid),
        *("--cron", "30 7 * * 1-5", "--timezone", "America/New_York", "--input", "report"),
    )
    assert made.returncode == 0, made.stderr
    row = json.loads(made.stdout)
    assert row["status"] == "active" and row["cron"] == "30 7 * * 1-5"
    schedule_id = row["schedule_id"]
    bad = asr(
        database_url,
        *("schedules", "create", "--tenant", tenant.name, "--session", sid, "--cron", "99 * * * *"),
    )
    assert bad.returncode == 1 and "not a cron expression" in bad.stderr
    paused = asr(database_url, "schedules", "pause", "--tenant", tenant.name, schedule_id)
    assert paused.returncode == 0 and json.loads(paused.stdout)["status"] == "paused"
    listed = asr(database_url, "schedules", "list", "--tenant", tenant.name)
    assert [json.loads(line)["schedule_id"] for line in listed.stdout.splitlines()] == [schedule_id]
    # The API sees what the CLI did.
    got = (await client.get(f"/v1/schedules/{schedule_id}")).json()
    assert got["status"] == "paused" and got["timezone"] == "America/New_York"
    fired = await client.post(f"/v1/schedules/{schedule_id}/trigger")
    assert fired.status_code == 202
    runs = asr(database_url, "schedules", "runs", "--tenant", tenant.name, schedule_id)
    assert [json.loads(line)["run_id"] for line in runs.stdout.splitlines()] == [
        fired.json()["run_id"]
    ]
    gone = asr(database_url, "schedules", "delete", "--tenant", tenant.name, schedule_id)
    assert gone.returncode == 0
    assert (await client.get(f"/v1/schedules/{schedule_id}")).status_code == 404
