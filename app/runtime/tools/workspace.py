"""Where a session's processes run and what they may run: the process plane's policy.

Pure functions over a `ProcessPolicy`, so the safety rules can be tested without starting
anything. A command line is split with `shlex` and executed directly (never through a
shell), its program checked by name against an allowlist and a denylist; the working
directory is the session's workspace, `<root>/<tenant_id>/<workspace name>`, and a name that
would leave that folder (`..`, an absolute path, a symlink pointing out) is refused; the
environment is rebuilt from nothing, so no `ASR_*` setting or provider key reaches a process.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from app.runtime.errors import CommandNotAllowed, WorkspaceOutsideRoot


@dataclass(frozen=True, slots=True)
class ProcessPolicy:
    """The operator's limits for background processes (from `ASR_*` settings)."""

    root: Path
    allowlist: frozenset[str] = frozenset()  # empty: any program not on the denylist
    denylist: frozenset[str] = frozenset()
    max_runtime_seconds: float = 300.0
    max_output_bytes: int = 1_048_576
    max_live_per_tenant: int = 4
    persisted_output_bytes: int = 16_384
    path: str = "/usr/local/bin:/usr/bin:/bin"
    # Values never to show in captured output (provider keys, database password): a process
    # runs as the service's user and could read them from the service's own files.
    secrets: tuple[str, ...] = field(default=(), repr=False)


def parse_command(command: str, policy: ProcessPolicy) -> list[str]:
    """The argv of a command line, after the allowlist and denylist checks.

    Raises:
        CommandNotAllowed: unparsable, empty, given by path, or not permitted.
    """
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandNotAllowed(f"the command cannot be parsed: {exc}") from exc
    if not argv:
        raise CommandNotAllowed("the command is empty")
    program = argv[0]
    if "/" in program or program in (".", ".."):
        # By name only: a path would sidestep the allowlist (`/tmp/x/sleep`).
        raise CommandNotAllowed(f"give the program by name, not by path: {program!r}")
    if program in policy.denylist:
        raise CommandNotAllowed(f"command {program!r} is on this server's denylist")
    if policy.allowlist and program not in policy.allowlist:
        allowed = ", ".join(sorted(policy.allowlist))
        raise CommandNotAllowed(f"command {program!r} is not allowed here (allowed: {allowed})")
    return argv


def resolve_program(program: str, policy: ProcessPolicy) -> str:
    """The absolute path of `program` on the policy's PATH (not the service's own PATH)."""
    found = shutil.which(program, path=policy.path)
    if found is None:
        raise CommandNotAllowed(f"command {program!r} was not found on this server")
    return found


def workspace_name(binding: dict[str, Any], session_id: str) -> str:
    """The session's workspace: its binding's `workspace`, else the session id."""
    name = binding.get("workspace", session_id)
    if not isinstance(name, str):
        raise WorkspaceOutsideRoot("binding.workspace must be a relative folder name")
    return name


def workspace_dir(policy: ProcessPolicy, tenant_id: str, name: str) -> Path:
    """`<root>/<tenant_id>/<name>`, resolved; refuses every name that would leave it.

    Raises:
        WorkspaceOutsideRoot: an empty or absolute name, `..`, `~`, a NUL byte, or a path
            that resolves (through symlinks too) outside the tenant's folder.
    """
    root = policy.root.resolve()
    tenant_root = (root / tenant_id).resolve()
    if tenant_root.parent != root:
        raise WorkspaceOutsideRoot("the tenant's folder would leave the workspace root")
    pure = PurePosixPath(name)
    if (
        not name.strip()
        or "\x00" in name
        or pure.is_absolute()
        or ".." in pure.parts
        or name.startswith("~")
    ):
        raise WorkspaceOutsideRoot(
            f"workspace {name!r} must be a relative folder name inside the workspace root"
        )
    target = (tenant_root / pure).resolve()
    if target == tenant_root or not target.is_relative_to(tenant_root):
        raise WorkspaceOutsideRoot(f"workspace {name!r} resolves outside the workspace root")
    return target


def process_environment(policy: ProcessPolicy, cwd: Path) -> dict[str, str]:
    """A minimal environment built from nothing: PATH, HOME, locale; no service settings."""
    return {
        "PATH": policy.path,
        "HOME": str(cwd),
        "PWD": str(cwd),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",  # so a Python process's output reaches its logs as it goes
    }


def redact(data: bytes, secrets: tuple[str, ...]) -> bytes:
    """Mask each secret with as many `*` (same length, so log offsets stay valid)."""
    for secret in secrets:
        raw = secret.encode()
        if raw and raw in data:
            data = data.replace(raw, b"*" * len(raw))
    return data


def split_names(value: str) -> frozenset[str]:
    """`"a, b,c"` -> {"a", "b", "c"} (settings hold lists as comma-separated text)."""
    return frozenset(part.strip() for part in value.split(",") if part.strip())
