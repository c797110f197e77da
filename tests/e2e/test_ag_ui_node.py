"""AG-UI connect and CopilotKit's runtime with `AsrAgentRunner`, driven from Node against two
replicas sharing one database: the official `@ag-ui/client` connects on the replica that does
not run the run (clients/ag-ui-tests/test/connect.test.mjs), and CopilotKit runtime instances
run, connect, ask and stop through either replica (clients/copilotkit-tests); and the shared
state the official client builds from a run's STATE_SNAPSHOT and STATE_DELTAs is the stored one
(clients/ag-ui-tests/test/state.test.mjs).

The Node packages are installed by `npm ci` in their folders (as `.ci/run` does); without
them the tests are skipped, never faked."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Server, TenantKey
from tests.e2e.test_runs import replicas  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"


async def node_test(folder: Path, script: str, servers: list[Server], tenant: TenantKey) -> str:
    node = shutil.which("node")
    if node is None or not (folder / "node_modules").is_dir():
        pytest.skip(f"node or {folder.name}/node_modules missing (npm ci in {folder})")
    env = {
        **os.environ,
        "ASR_URL": servers[0].base_url,
        "ASR_URL_B": servers[1].base_url,
        "ASR_KEY": tenant.key,
        # CopilotKit's runtime reports usage to its maker unless told not to.
        "COPILOTKIT_TELEMETRY_DISABLED": "true",
    }
    result = await asyncio.to_thread(
        subprocess.run,
        [node, "--preserve-symlinks", "--test", "--test-concurrency=1", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


async def test_official_ag_ui_client_connects_across_replicas(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    out = await node_test(CLIENTS / "ag-ui-tests", "test/connect.test.mjs", replicas, tenant)
    assert "# fail 0" in out, out


async def test_copilotkit_runtime_with_asr_agent_runner_across_replicas(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    folder = CLIENTS / "copilotkit-tests"
    if not (CLIENTS / "typescript" / "dist" / "copilotkit.js").is_file():
        pytest.skip("clients/typescript is not built (npm ci && npm run build there)")
    out = await node_test(folder, "test/runner.test.mjs", replicas, tenant)
    assert "# fail 0" in out, out


async def test_official_ag_ui_client_shares_state_with_the_service(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    """clients/ag-ui-tests/test/state.test.mjs on a real database (PostgreSQL in CI): the
    STATE_SNAPSHOT and STATE_DELTAs HttpAgent applies give the object the service stores."""
    out = await node_test(CLIENTS / "ag-ui-tests", "test/state.test.mjs", replicas, tenant)
    assert "# fail 0" in out, out
