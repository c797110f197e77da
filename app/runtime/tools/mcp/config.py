"""MCP server settings: a stdio command or a Streamable HTTP URL, and their limits.

    mcp_servers:
      files:
        command: [python3, -m, files_server]
        env: {FILES_TOKEN: {env: FILES_TOKEN}}   # references only, resolved at start
        workspace_root: true                      # run in the session's workspace
      github:
        url: https://mcp.example/mcp
        headers:
          Authorization: {env: GITHUB_TOKEN, prefix: "Bearer "}
        approval_required: true
        timeout_seconds: 30
        max_output_bytes: 65536

Header values and extra environment variables are references (`env:` or `file:`), or a
`value:` for what is not a secret; a bare string is refused, so a token can never be
pasted into the configuration and shown back. A stdio server starts with the SDK's minimal
environment (PATH, HOME, ...) plus its `env`: no `ASR_*` setting or provider key reaches it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")


class McpConfigError(ValueError):
    """The MCP servers cannot be used; the message lists every problem found."""


class SecretValue(BaseModel):
    """A header or environment value: read from an env var or a file, or a plain value."""

    model_config = ConfigDict(extra="forbid")

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: Path | None = None
    value: str | None = Field(default=None, description="Only for what is not a secret.")
    prefix: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> SecretValue:
        if sum(x is not None for x in (self.env, self.file, self.value)) != 1:
            raise ValueError("give exactly one of env, file or value")
        return self

    def resolve(self) -> str | None:
        if self.value is not None:
            return self.prefix + self.value
        if self.env is not None:
            found = os.environ.get(self.env)
        else:
            assert self.file is not None
            try:
                found = self.file.read_text(encoding="utf-8").strip()
            except OSError:
                found = None
        return self.prefix + found if found else None

    def describe(self) -> str:
        if self.env is not None:
            return f"env:{self.env}"
        return f"file:{self.file}" if self.file is not None else "value"


class McpServerConfig(BaseModel):
    """One MCP server as an operator writes it."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = None
    headers: dict[str, SecretValue] = Field(default_factory=dict)
    env: dict[str, SecretValue] = Field(default_factory=dict)
    cwd: Path | None = None
    stderr_file: Path | None = Field(
        default=None,
        description="stdio: append the server's stderr here (default: discarded, so a "
        "server printing its own token never writes it into the service's log).",
    )
    workspace_root: bool = Field(
        default=False, description="stdio: one process per workspace, started in it."
    )
    tools: list[str] | None = Field(default=None, description="Offer only these tools.")
    approval_required: bool = Field(default=False, description="Every call needs approval.")
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    connect_timeout_seconds: float = Field(default=15.0, gt=0, le=300)
    max_output_bytes: int = Field(default=65_536, ge=256, le=16 * 1_048_576)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (Streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must be http(s)")
        if self.url is not None and (
            self.env or self.workspace_root or self.cwd or self.stderr_file
        ):
            raise ValueError(
                "env, cwd, stderr_file and workspace_root are for stdio servers (command)"
            )
        if self.command is not None and self.headers:
            raise ValueError("headers are for Streamable HTTP servers (url)")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable_http"


def parse_servers(
    raw: dict[str, Any], *, source: str = "mcp_servers"
) -> dict[str, McpServerConfig]:
    """Validate every server entry.

    Raises:
        McpConfigError: every invalid entry, named with its field.
    """
    problems: list[str] = []
    found: dict[str, McpServerConfig] = {}
    for name, entry in raw.items():
        where = f"{source}: MCP server {name!r}"
        if not SERVER_NAME.match(str(name)) or "__" in str(name):
            problems.append(
                f"{where}: names are a letter, then up to 31 letters, digits, - or _"
                " (no '__': it separates the server from the tool)"
            )
            continue
        if isinstance(entry, dict):
            bare = [
                k
                for k, v in {**entry.get("headers", {}), **entry.get("env", {})}.items()
                if isinstance(v, str)
            ]
            if bare:
                problems.append(
                    f"{where}: {', '.join(sorted(bare))}: give {{env: NAME}}, {{file: PATH}} or "
                    "{value: ...} (a secret is never written into the configuration)"
                )
                continue
        try:
            found[str(name)] = McpServerConfig.model_validate(entry)
        except ValidationError as exc:
            for error in exc.errors():
                location = ".".join(str(part) for part in error["loc"]) or "(server)"
                problems.append(f"{where}: {location}: {error['msg']}")
    if problems:
        raise McpConfigError("\n".join(problems))
    return dict(sorted(found.items()))
