"""The Python client as its own distribution (issue #18): it installs without the server's
stack, a project with its own `app` package can use it, its models match the live OpenAPI
document (its stream frame models are generated from it), and the sync client is what
tools/unasync.py generates from the async one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from asr_client import models

from tests.conftest import ROOT, Server, TenantKey

CLIENT = ROOT / "clients" / "python"
SERVER_STACK = {"fastapi", "sqlalchemy", "starlette", "alembic", "asyncpg", "uvicorn"}


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    sys.path.insert(0, str(CLIENT / "tools"))
    try:
        import unasync
    finally:
        sys.path.remove(str(CLIENT / "tools"))
    package = CLIENT / "asr_client"
    expected = unasync.transform((package / "_async.py").read_text())
    assert (package / "_sync.py").read_text() == expected, "run clients/python/tools/unasync.py"


def test_the_server_never_imports_the_client() -> None:
    for path in (ROOT / "app").rglob("*.py"):
        assert "asr_client" not in path.read_text(), path


def test_response_models_match_the_openapi_components(server: Server) -> None:
    """Every field the server documents is a field of the client's model of the same name."""
    components = httpx.get(server.base_url + "/openapi.json", timeout=10).json()["components"]
    schemas = components["schemas"]
    checked = 0
    for name in dir(models):
        model = getattr(models, name)
        if not (isinstance(model, type) and issubclass(model, models.Model)) or name == "Model":
            continue
        wire = {"Event": "SessionCreatedEvent"}.get(name, name)
        if wire not in schemas:
            continue
        documented = set(schemas[wire].get("properties", {}))
        assert documented <= set(model.model_fields), (name, documented - set(model.model_fields))
        required = set(schemas[wire].get("required", []))
        optional_here = {f for f, info in model.model_fields.items() if not info.is_required()}
        assert not (required & optional_here - {"processes", "pending", "history"}), name
        checked += 1
    assert checked >= 30


def test_stream_frame_models_are_generated_from_the_openapi_document(server: Server) -> None:
    """`asr_client/events.py` (one model per event type, a union discriminated by `type`, the
    delta, control and problem frames) is what tools/gen_events.py makes of /openapi.json."""
    document = httpx.get(server.base_url + "/openapi.json", timeout=10).json()
    sys.path.insert(0, str(CLIENT / "tools"))
    try:
        import gen_events
    finally:
        sys.path.remove(str(CLIENT / "tools"))
    generated = (CLIENT / "asr_client" / "events.py").read_text()
    assert generated == gen_events.render(document), (
        "run: python clients/python/tools/gen_events.py <server>/openapi.json"
    )


def test_the_version_follows_the_api_version(server: Server) -> None:
    """Version policy: the client's major.minor is the API's (`info.version`), the patch its
    own; `__version__` is the distribution's version."""
    import tomllib

    import asr_client

    api = httpx.get(server.base_url + "/openapi.json", timeout=10).json()["info"]["version"]
    version = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"]
    assert asr_client.__version__ == version
    assert version.split(".")[:2] == api.split(".")[:2], (version, api)


@pytest.mark.timeout(600)
async def test_pip_install_in_a_fresh_venv_and_a_project_with_its_own_app_package(
    server: Server, tenant: TenantKey, tmp_path: Path
) -> None:
    """`pip install ./clients/python` brings httpx, httpx-sse and pydantic, not FastAPI or
    SQLAlchemy; a project whose own package is called `app` imports and uses the client.
    Slow (a venv and an install from the registry), so it runs on the SQLite tier only."""
    if os.environ.get("ASR_TEST_DATABASE_URL"):
        pytest.skip("runs once per CI run, on the SQLite tier")
    venv = tmp_path / "venv"
    await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = await asyncio.to_thread(
        subprocess.run,
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(CLIENT)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    listed = await asyncio.to_thread(
        subprocess.run,
        [str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"asr-client", "httpx", "httpx-sse", "pydantic"} <= installed
    assert not installed & SERVER_STACK, installed & SERVER_STACK

    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text('NAME = "my own app"\n')
    (project / "main.py").write_text(
        textwrap.dedent(
            """
            import os

            import app
            from asr_client import SessionClient

            with SessionClient(os.environ["ASR_URL"], api_key=os.environ["ASR_KEY"]) as asr:
                run = asr.run(asr.create_session().session_id, "hi")
                print(app.NAME, run.stop_reason, run.output)
            """
        )
    )
    env = {"PATH": os.environ.get("PATH", ""), "ASR_URL": server.base_url, "ASR_KEY": tenant.key}
    result = await asyncio.to_thread(
        subprocess.run,
        [str(python), "main.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "my own app COMPLETED echo: hi"
