"""Issue 10, the process plane over real HTTP: a real `asr serve` with processes enabled, real
OS processes in a workspace under a temporary root.

The shell tool starts `sleep 30` (listed running, logs readable, stop ends it, PROCESS_EXITED
in the ledger); stdin and offset reads; the allowlist, a workspace escaping the root, the
output cap and the time cap; the scrubbed environment; the per-tenant cap (429); a restart
(graceful, and a SIGKILL) leaves the process reported `restored`; with processes disabled
the tool is absent and the routes answer 404 `processes_disabled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, TenantKey, start_server, stop_server

OUTPUT_CAP = 4096
CUT_MARKER = f"[output cut off at {OUTPUT_CAP} bytes; the process was killed]"


def enabled_env(root: Path, **extra: str) -> dict[str, str]:
    return {
        "ASR_PROCESSES_ENABLED": "true",
        "ASR_WORKSPACE_ROOT": str(root),
        "ASR_PROCESS_MAX_OUTPUT_BYTES": str(OUTPUT_CAP),
        "ASR_PROCESS_MAX_LIVE_PER_TENANT": "2",
        **extra,
    }


@pytest.fixture(scope="module")
def workspace_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspaces")


@pytest.fixture(scope="module")
def work_server(
    database_url: str, workspace_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("work-server") / "server.log"
    server = start_server(database_url, log, **enabled_env(workspace_root))
    yield server
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()[-4000:]


@pytest.fixture
async def http(work_server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=work_server.base_url, headers=tenant.headers, timeout=30
    ) as client:
        yield client


async def wait_for(
    probe: Callable[[], Awaitable[Any]], *, within: float = 10.0, step: float = 0.05
) -> Any:
    """Poll `probe` until it returns something truthy; bounded in time."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(step)
    raise AssertionError(f"condition not met within {within} s")


async def new_session(http: httpx.AsyncClient, **body: object) -> str:
    response = await http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def run(http: httpx.AsyncClient, sid: str, text: str) -> dict:
    response = await http.post(f"/v1/sessions/{sid}/runs", json={"input": text})
    assert response.status_code == 200, response.text
    return response.json()


async def start(http: httpx.AsyncClient, sid: str, command: str, **extra: object) -> dict:
    response = await http.post(f"/v1/sessions/{sid}/processes", json={"command": command, **extra})
    assert response.status_code == 201, response.text
    assert response.headers["location"].endswith(response.json()["process_id"])
    return response.json()


async def process(http: httpx.AsyncClient, sid: str, pid: str) -> dict:
    response = await http.get(f"/v1/sessions/{sid}/processes/{pid}")
    assert response.status_code == 200, response.text
    return response.json()


async def ended(http: httpx.AsyncClient, sid: str, pid: str) -> dict:
    """The process once it has ended and its PROCESS_EXITED is in the ledger."""

    async def probe() -> dict | None:
        view = await process(http, sid, pid)
        return view if view["status"] != "running" and not view["live"] else None

    return await wait_for(probe)


async def logs(http: httpx.AsyncClient, sid: str, pid: str, offset: int = 0) -> dict:
    response = await http.get(f"/v1/sessions/{sid}/processes/{pid}/logs", params={"offset": offset})
    assert response.status_code == 200, response.text
    return response.json()


async def events(http: httpx.AsyncClient, sid: str) -> list[dict]:
    response = await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})
    return response.json()["data"]


async def assert_consistent(http: httpx.AsyncClient, sid: str) -> None:
    seqs = [e["seq"] for e in await events(http, sid)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True


def tool_outputs(evts: list[dict]) -> list[str]:
    return [e["payload"]["item"]["output"] for e in evts if e["type"] == "TOOL_RESULT"]


async def test_shell_tool_runs_sleep_listed_logs_stop_and_exited_event(
    http: httpx.AsyncClient,
) -> None:
    sid = await new_session(http)
    result = await run(http, sid, '[tool:shell {"command": "sleep 30"}]')
    assert result["stop_reason"] == "COMPLETED", result
    answer = json.loads(tool_outputs(await events(http, sid))[0])
    assert answer["status"] == "running" and answer["exit_code"] is None
    pid = answer["process_id"]

    listed = (await http.get(f"/v1/sessions/{sid}/processes")).json()["data"]
    assert [(p["process_id"], p["status"], p["command"]) for p in listed] == [
        (pid, "running", ["sleep", "30"])
    ]
    assert listed[0]["run_id"] == result["run_id"] and listed[0]["live"] is True
    read = await logs(http, sid, pid)
    assert (read["data"], read["size"], read["eof"]) == ("", 0, False)

    stopped = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stop")
    assert stopped.status_code == 200
    assert stopped.json()["status"] == "exited" and stopped.json()["reason"] == "stopped"
    assert stopped.json()["exit_code"] == -signal.SIGTERM

    evts = await events(http, sid)
    started = [e for e in evts if e["type"] == "PROCESS_STARTED"]
    exited = [e for e in evts if e["type"] == "PROCESS_EXITED"]
    assert [e["payload"]["process_id"] for e in started + exited] == [pid, pid]
    assert started[0]["run_id"] == result["run_id"]
    assert started[0]["payload"]["command"] == ["sleep", "30"]
    assert exited[0]["payload"]["reason"] == "stopped"
    assert exited[0]["payload"]["exit_code"] == -signal.SIGTERM
    assert "env" not in started[0]["payload"]
    requested = next(e for e in evts if e["type"] == "MODEL_REQUEST")["payload"]["tools"]
    assert "shell" in requested and "delegate" in requested
    display = (await http.get(f"/v1/sessions/{sid}")).json()
    assert display["counts"]["processes"] == 1
    state = (await http.get(f"/v1/sessions/{sid}/state")).json()
    assert state["processes"][pid]["status"] == "exited"
    assert state["processes"][pid]["exit_code"] == -signal.SIGTERM
    tools = [t["name"] for t in (await http.get("/v1/tools")).json()["data"]]
    assert "shell" in tools
    await assert_consistent(http, sid)
    again = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stop")
    assert again.status_code == 200 and again.json()["reason"] == "stopped"


async def test_short_command_answers_with_its_output_and_exit_code(
    http: httpx.AsyncClient, workspace_root: Path, tenant: TenantKey
) -> None:
    sid = await new_session(http, binding={"workspace": "repo-a"})
    result = await run(http, sid, '[tool:shell {"command": "printf \'%s-%s\' a b"}]')
    answer = json.loads(tool_outputs(await events(http, sid))[0])
    assert (answer["status"], answer["exit_code"], answer["output"]) == ("exited", 0, "a-b")
    assert result["output"].startswith("shell returned: ")
    assert (workspace_root / tenant.tenant_id / "repo-a").is_dir()
    await assert_consistent(http, sid)


async def test_binary_output_is_stored_as_text(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    pid = (await start(http, sid, "printf 'a\\0b\\377'"))["process_id"]
    await ended(http, sid, pid)
    assert (await logs(http, sid, pid))["data"] == "a\ufffdb\ufffd"
    exited = next(e for e in await events(http, sid) if e["type"] == "PROCESS_EXITED")
    assert exited["payload"]["output"] == "a\ufffdb\ufffd"


async def test_stdin_and_offset_reads(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    pid = (await start(http, sid, "cat"))["process_id"]
    wrote = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stdin", json={"data": "hello\n"})
    assert wrote.status_code == 200 and wrote.json()["bytes_written"] == 6

    async def echoed() -> dict | None:
        read = await logs(http, sid, pid)
        return read if read["data"] == "hello\n" else None

    first = await wait_for(echoed)
    assert (first["offset"], first["next_offset"], first["status"]) == (0, 6, "running")
    tail = await logs(http, sid, pid, offset=2)
    assert (tail["data"], tail["offset"], tail["next_offset"]) == ("llo\n", 2, 6)
    await http.post(
        f"/v1/sessions/{sid}/processes/{pid}/stdin", json={"data": "bye\n", "eof": True}
    )
    done = await ended(http, sid, pid)
    assert (done["status"], done["exit_code"], done["reason"]) == ("exited", 0, "exited")
    # Ended and recorded: the output now comes from PROCESS_EXITED in the ledger.
    kept = await logs(http, sid, pid)
    assert (kept["data"], kept["eof"], kept["status"]) == ("hello\nbye\n", True, "exited")
    late = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stdin", json={"data": "x"})
    assert late.status_code == 409 and late.json()["code"] == "process_not_running"
    missing = await http.get(f"/v1/sessions/{sid}/processes/proc_nope")
    assert missing.status_code == 404 and missing.json()["code"] == "process_not_found"


async def test_command_outside_the_allowlist_is_refused(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    for command in ("bash -c 'echo hi'", "/bin/sleep 1", "rm -rf .", "", "echo 'unclosed"):
        response = await http.post(f"/v1/sessions/{sid}/processes", json={"command": command})
        expected = 422
        assert response.status_code == expected, (command, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        if command:
            assert response.json()["code"] == "command_not_allowed", command
    result = await run(http, sid, '[tool:shell {"command": "bash -c id"}]')
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    output = tool_outputs(await events(http, sid))[0]
    assert "command_not_allowed" in output and "'bash' is not allowed" in output
    assert (await http.get(f"/v1/sessions/{sid}/processes")).json()["data"] == []
    await assert_consistent(http, sid)


async def test_workspace_escaping_the_root_is_refused(
    http: httpx.AsyncClient, workspace_root: Path
) -> None:
    for workspace in ("../escaped", "/etc", "a/../../escaped", "~root"):
        sid = await new_session(http, binding={"workspace": workspace})
        response = await http.post(f"/v1/sessions/{sid}/processes", json={"command": "true"})
        assert response.status_code == 422, (workspace, response.text)
        assert response.json()["code"] == "workspace_outside_root"
    result = await run(http, sid, '[tool:shell {"command": "ls"}]')
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    assert "workspace_outside_root" in tool_outputs(await events(http, sid))[0]
    assert not (workspace_root / "escaped").exists()
    assert not (workspace_root.parent / "escaped").exists()


async def test_output_over_the_cap_is_cut_off_and_the_process_killed(
    http: httpx.AsyncClient,
) -> None:
    sid = await new_session(http)
    pid = (await start(http, sid, "yes"))["process_id"]
    done = await ended(http, sid, pid)
    assert (done["status"], done["reason"], done["exit_code"]) == (
        "exited",
        "output_cap",
        -signal.SIGKILL,
    )
    read = await logs(http, sid, pid)
    assert read["data"].endswith(CUT_MARKER + "\n")
    assert read["data"].startswith("y\ny\n")
    assert done["output_bytes"] == read["size"] == OUTPUT_CAP + len(CUT_MARKER) + 2
    exited = next(e for e in await events(http, sid) if e["type"] == "PROCESS_EXITED")
    assert exited["payload"]["output_cut_off"] is True


async def test_process_past_its_runtime_is_killed(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    pid = (await start(http, sid, "sleep 30", timeout_seconds=0.5))["process_id"]
    done = await ended(http, sid, pid)
    assert (done["reason"], done["exit_code"]) == ("timeout", -signal.SIGKILL)
    assert "[killed after its max runtime of 0.5 s]" in (await logs(http, sid, pid))["data"]


async def test_environment_is_scrubbed_and_cwd_is_the_workspace(
    http: httpx.AsyncClient, workspace_root: Path, tenant: TenantKey
) -> None:
    sid = await new_session(http)
    script = "import os, json; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"
    pid = (await start(http, sid, f'python3 -c "{script}"'))["process_id"]
    await ended(http, sid, pid)
    seen = json.loads((await logs(http, sid, pid))["data"])
    assert seen["cwd"] == str((workspace_root / tenant.tenant_id / sid).resolve())
    assert not [k for k in seen["env"] if k.startswith("ASR_") or "KEY" in k]
    assert seen["env"]["PATH"] == "/usr/local/bin:/usr/bin:/bin"


async def test_per_tenant_live_cap_is_429_with_retry_after(
    http: httpx.AsyncClient, work_server: Server, other_tenant: TenantKey
) -> None:
    sid = await new_session(http)
    pids = [(await start(http, sid, "sleep 30"))["process_id"] for _ in range(2)]
    over = await http.post(f"/v1/sessions/{sid}/processes", json={"command": "sleep 1"})
    assert over.status_code == 429
    assert over.headers["content-type"].startswith("application/problem+json")
    assert over.json()["code"] == "too_many_processes"
    assert 1 <= int(over.headers["retry-after"]) <= 60
    # The cap is per tenant: another tenant still starts processes.
    async with httpx.AsyncClient(
        base_url=work_server.base_url, headers=other_tenant.headers, timeout=30
    ) as other:
        osid = await new_session(other)
        mine = await start(other, osid, "true")
        await ended(other, osid, mine["process_id"])
    for pid in pids:
        assert (await http.post(f"/v1/sessions/{sid}/processes/{pid}/stop")).status_code == 200
    assert (await start(http, sid, "true"))["status"] in ("running", "exited")


async def test_deleting_a_session_stops_its_processes(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    started = await start(http, sid, "sleep 30")
    assert (await http.delete(f"/v1/sessions/{sid}")).status_code == 204
    with pytest.raises(ProcessLookupError):
        os.killpg(started["pid"], 0)  # the process group is gone


# ------------------------------------------------------------------------- restart


@pytest.fixture
def restartable(database_url: str, tmp_path: Path) -> Iterator[list[Server]]:
    """Servers started by a test (same database, same workspace root), stopped afterwards."""
    servers: list[Server] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            stop_server(server)


async def test_restart_and_crash_while_processes_run_report_them_restored(
    database_url: str, tmp_path: Path, tenant: TenantKey, restartable: list[Server]
) -> None:
    """A graceful restart records the running process (its output survives); after a crash
    nothing was recorded, and the process is still reported, restored, with no output."""
    env = enabled_env(tmp_path / "ws")

    def serve(name: str) -> httpx.AsyncClient:
        restartable.append(start_server(database_url, tmp_path / f"{name}.log", **env))
        return httpx.AsyncClient(
            base_url=restartable[-1].base_url, headers=tenant.headers, timeout=30
        )

    script = "import time; print('before the restart', flush=True); time.sleep(30)"
    async with serve("first") as http:
        sid = await new_session(http)
        args = json.dumps({"command": f'python3 -c "{script}"'})
        await run(http, sid, f"[tool:shell {args}]")
        pid = (await http.get(f"/v1/sessions/{sid}/processes")).json()["data"][0]["process_id"]

        async def printed() -> bool:
            return "before the restart" in (await logs(http, sid, pid))["data"]

        await wait_for(printed)
    stop_server(restartable[-1])  # SIGTERM: a graceful stop records the process

    async with serve("second") as http:
        assert (await http.get(f"/v1/sessions/{sid}")).status_code == 200
        view = await process(http, sid, pid)
        assert (view["status"], view["reason"], view["live"]) == (
            "restored",
            "service_stopped",
            False,
        )
        read = await logs(http, sid, pid)
        assert read["data"] == "before the restart\n" and read["eof"] is True
        stop = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stop")
        assert stop.status_code == 200 and stop.json()["status"] == "restored"
        stdin = await http.post(f"/v1/sessions/{sid}/processes/{pid}/stdin", json={"data": "x"})
        assert stdin.status_code == 409 and stdin.json()["code"] == "process_not_running"
        await assert_consistent(http, sid)
        crashed = await start(http, sid, "sleep 30")
    restartable[-1].process.kill()  # SIGKILL: nothing is recorded on the way down
    restartable[-1].process.wait(timeout=10)
    # The orphan is no longer the service's to control; end it so the test leaves nothing.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(crashed["pid"], signal.SIGKILL)

    async with serve("third") as http:
        listed = (await http.get(f"/v1/sessions/{sid}/processes")).json()["data"]
        assert [(p["process_id"], p["status"], p["reason"]) for p in listed] == [
            (pid, "restored", "service_stopped"),
            (crashed["process_id"], "restored", None),
        ]
        read = await logs(http, sid, crashed["process_id"])
        assert (read["data"], read["size"], read["eof"]) == ("", 0, True)
        assert (await http.get(f"/v1/sessions/{sid}")).json()["counts"]["processes"] == 2
        await assert_consistent(http, sid)
    for server in restartable[:2]:
        assert "Traceback" not in server.log(), server.log()[-4000:]


# ------------------------------------------------------------------------ disabled


async def test_processes_disabled_tool_absent_and_routes_404(
    server: Server, tenant: TenantKey
) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, headers=tenant.headers) as http:
        sid = await new_session(http)
        result = await run(http, sid, '[tool:shell {"command": "sleep 1"}]')
        assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
        evts = await events(http, sid)
        assert tool_outputs(evts) == ["error: no tool named 'shell' is available"]
        requested = next(e for e in evts if e["type"] == "MODEL_REQUEST")["payload"]["tools"]
        assert "shell" not in requested and "delegate" in requested
        assert not [e for e in evts if e["type"].startswith("PROCESS_")]
        tools = [t["name"] for t in (await http.get("/v1/tools")).json()["data"]]
        assert "shell" not in tools and "delegate" in tools
        base = f"/v1/sessions/{sid}/processes"
        for method, path, body in (
            ("GET", base, None),
            ("POST", base, {"command": "sleep 1"}),
            ("GET", f"{base}/p1", None),
            ("GET", f"{base}/p1/logs", None),
            ("POST", f"{base}/p1/stdin", {"data": "x"}),
            ("POST", f"{base}/p1/stop", None),
        ):
            response = await http.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["code"] == "processes_disabled", (method, path)
        await assert_consistent(http, sid)
