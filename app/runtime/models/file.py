"""The models file (`ASR_MODELS_FILE`): model profiles and MCP servers, in one YAML file.

    profiles:
      claude:
        kind: anthropic
        api_key_env: ANTHROPIC_API_KEY
        default_model: claude-sonnet-4-5
      local:
        kind: openai
        base_url: http://127.0.0.1:11434/v1
        default_model: llama3.2
    mcp_servers:
      files:
        command: [python3, -m, my_files_server]

Both sections are optional. Entries of `ASR_MODEL_PROFILES` and `ASR_MCP_SERVERS` (JSON, for
deployments that configure through the environment) are added to the file's and win on a
name clash. The file holds no secrets: credentials are references (see `profiles.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.runtime.models.profiles import ProfileError


@dataclass(frozen=True, slots=True)
class ModelsFile:
    """The raw sections, validated later by the profile and MCP server parsers."""

    profiles: dict[str, Any] = field(default_factory=dict)
    mcp_servers: dict[str, Any] = field(default_factory=dict)


def read_models_file(path: Path | None) -> ModelsFile:
    """Read the file (None: no file).

    Raises:
        ProfileError: unreadable file, bad YAML, or sections that are not mappings.
    """
    if path is None:
        return ModelsFile()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the models file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return ModelsFile()
    if not isinstance(data, dict) or set(data) - {"profiles", "mcp_servers"}:
        raise ProfileError(f"{path}: expected the mappings `profiles:` and/or `mcp_servers:`")
    sections: dict[str, dict[str, Any]] = {}
    for name in ("profiles", "mcp_servers"):
        value = data.get(name) or {}
        if not isinstance(value, dict):
            raise ProfileError(f"{path}: `{name}` must be a mapping of names to settings")
        sections[name] = value
    return ModelsFile(profiles=sections["profiles"], mcp_servers=sections["mcp_servers"])
