"""Model profiles: named, operator-configured model endpoints an agent spec chooses from.

A profile is a kind (`openai`, `anthropic`, `gemini`, or the built-in `scripted`), a base
URL, a credential, a default model, timeouts, a retry policy and limits. Operators write
them in the models file (`ASR_MODELS_FILE`, YAML, under `profiles:`) or in
`ASR_MODEL_PROFILES` (JSON); the agent spec's `provider` names one.

Credentials are only ever *references*: `api_key_env` (an environment variable) or
`api_key_file` (a file whose content is the key). A literal `api_key` is refused when the
settings are read, so a key can never be copied into a profile listing, an event, a snapshot
or a log line by way of its configuration; the value is read when a client is built and
lives only inside that SDK client.

Two profiles exist without configuration: `scripted` (offline, deterministic) and `openai`,
built from the older `ASR_OPENAI_BASE_URL` / `ASR_OPENAI_API_KEY` settings (a profile named
`openai` in the file replaces it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Kind = Literal["openai", "anthropic", "gemini", "scripted"]
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
IMPLICIT_OPENAI_SETTING = "ASR_OPENAI_API_KEY (or ASR_OPENAI_BASE_URL for a keyless local server)"


class ProfileError(ValueError):
    """The profiles cannot be used; the message lists every problem found."""


class RetryPolicy(BaseModel):
    """How rate limits and unavailable endpoints are retried before the run stops."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=4, ge=1, le=20, description="Calls in all, the first too.")
    initial_backoff_seconds: float = Field(default=1.0, ge=0, le=60)
    max_backoff_seconds: float = Field(
        default=30.0, ge=0, le=600, description="No single wait is longer, whatever the hint."
    )


class ProfileConfig(BaseModel):
    """One profile as an operator writes it (a YAML mapping or a JSON object)."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    base_url: str | None = Field(default=None, max_length=2048)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api_key_file: Path | None = None
    default_model: str | None = Field(default=None, max_length=128)
    timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_output_tokens: int | None = Field(default=None, ge=1)
    context_window: int | None = Field(
        default=None, ge=64, description="Input tokens the model accepts (listing and budget)."
    )
    thinking_budget_tokens: int | None = Field(
        default=None,
        ge=1024,
        description="anthropic: extended thinking; gemini: the thinking budget (thoughts "
        "streamed as reasoning deltas).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        # Said plainly, rather than as "extra inputs are not permitted": the one thing an
        # operator must not do is paste a key into the configuration.
        if isinstance(data, dict) and any(k in data for k in ("api_key", "key", "token")):
            raise ValueError(
                "a literal key is not accepted: put it in an environment variable or a file "
                "and name it with api_key_env or api_key_file"
            )
        return data

    @model_validator(mode="after")
    def _one_credential(self) -> ProfileConfig:
        if self.api_key_env is not None and self.api_key_file is not None:
            raise ValueError("give api_key_env or api_key_file, not both")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        return self


@dataclass(frozen=True, slots=True)
class Credential:
    """Where a profile's key comes from (`source`, safe to show) and how to read it."""

    source: str
    setting: str  # what an operator sets to provide it
    read: Callable[[], str | None]


def env_credential(name: str) -> Credential:
    return Credential(
        source=f"env:{name}",
        setting=f"the environment variable {name}",
        read=lambda: os.environ.get(name) or None,
    )


def file_credential(path: Path) -> Credential:
    def read() -> str | None:
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    return Credential(source=f"file:{path}", setting=f"the key file {path}", read=read)


def value_credential(value: str, *, setting: str) -> Credential:
    """A key already held by the settings (`ASR_OPENAI_API_KEY`), for the implicit profile."""
    return Credential(source=f"env:{setting}", setting=setting, read=lambda: value or None)


@dataclass(frozen=True, slots=True)
class Profile:
    """A resolved profile: its configuration and where its credential comes from."""

    name: str
    config: ProfileConfig
    credential: Credential | None
    # What to set when the profile is not configured (None: nothing to set).
    unset_hint: str | None = None

    @property
    def kind(self) -> Kind:
        return self.config.kind

    def missing(self) -> str | None:
        """The setting an operator must fix before this profile can be used, or None."""
        if self.kind == "scripted":
            return None
        if self.credential is not None:
            if self.credential.read() is None:
                return self.unset_hint or self.credential.setting
            return None
        if self.kind == "openai" and self.config.base_url is not None:
            return None  # a local OpenAI-compatible server (Ollama, vLLM) needs no key
        return self.unset_hint or (
            f"api_key_env or api_key_file of profile {self.name!r} (kind {self.kind})"
        )

    def secret(self) -> str | None:
        return self.credential.read() if self.credential is not None else None

    def to_json(self) -> dict[str, Any]:
        """The profile as `GET /v1/models` shows it: never the key, only where it comes from."""
        missing = self.missing()
        return {
            "name": self.name,
            "kind": self.kind,
            "base_url": _without_userinfo(self.config.base_url),
            "default_model": self.config.default_model,
            "credential": self.credential.source if self.credential is not None else None,
            "configured": missing is None,
            "missing": missing,
            "timeout_seconds": self.config.timeout_seconds,
            "retry": self.config.retry.model_dump(),
            "max_output_tokens": self.config.max_output_tokens,
            "context_window": self.config.context_window,
            "thinking_budget_tokens": self.config.thinking_budget_tokens,
        }


def _without_userinfo(url: str | None) -> str | None:
    """A URL with any `user:password@` removed: a listing must not carry a credential."""
    if url is None:
        return None
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def build_profiles(
    raw: dict[str, Any],
    *,
    openai_base_url: str | None = None,
    openai_api_key: str = "",
    openai_model: str = "gpt-4o-mini",
    openai_timeout_seconds: float = 60.0,
    source: str = "profiles",
) -> dict[str, Profile]:
    """Validate configured profiles and add the implicit ones (`scripted`, `openai`).

    Raises:
        ProfileError: every invalid entry, named with its field.
    """
    profiles: dict[str, Profile] = {
        "scripted": Profile("scripted", ProfileConfig(kind="scripted"), None),
        "openai": Profile(
            "openai",
            ProfileConfig(
                kind="openai",
                base_url=openai_base_url,
                default_model=openai_model,
                timeout_seconds=openai_timeout_seconds,
            ),
            value_credential(openai_api_key, setting="ASR_OPENAI_API_KEY")
            if openai_api_key or openai_base_url is None
            else None,
            unset_hint=IMPLICIT_OPENAI_SETTING,
        ),
    }
    problems: list[str] = []
    for name, entry in raw.items():
        profile = _profile(str(name), entry, problems, source)
        if profile is not None:
            profiles[profile.name] = profile
    if problems:
        raise ProfileError("\n".join(problems))
    return dict(sorted(profiles.items()))


def _profile(name: str, entry: Any, problems: list[str], source: str) -> Profile | None:
    where = f"{source}: profile {name!r}"
    if not PROFILE_NAME.match(name):
        problems.append(f"{where}: names are 1-64 letters, digits, '_', '.', '-'")
        return None
    if name == "scripted":
        problems.append(f"{where}: the name is taken by the built-in scripted model")
        return None
    try:
        config = ProfileConfig.model_validate(entry)
    except ValidationError as exc:
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"]) or "(profile)"
            problems.append(f"{where}: {location}: {error['msg']}")
        return None
    credential = None
    if config.api_key_env is not None:
        credential = env_credential(config.api_key_env)
    elif config.api_key_file is not None:
        credential = file_credential(config.api_key_file)
    return Profile(name, config, credential)
