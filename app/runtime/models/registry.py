"""`ModelRegistry`: the profiles of this server and a model client for each.

The registry answers three questions: which profiles exist (`GET /v1/models`), whether
one can be used now (`check`, a 422 naming the setting to fix when not), and which client
serves it (`client`, built on first use and rebuilt when its key changes, so a rotated key
file or variable takes effect without a restart). Clients are wrapped in the profile's
retry policy. Keys are read here and handed to the SDK client; nothing else sees them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from app.runtime.errors import ModelProfileNotConfigured, UnknownModelProfile
from app.runtime.models.base import ModelClient
from app.runtime.models.profiles import Profile, ProfileConfig
from app.runtime.models.retry import RetryingModel
from app.runtime.models.scripted import ScriptedModel


def build_client(profile: Profile, key: str | None) -> ModelClient:
    """The SDK client of one profile (SDKs are imported only for the kinds in use)."""
    config = profile.config
    if config.kind == "scripted":
        return ScriptedModel()
    if config.kind == "openai":
        from app.runtime.models.openai_compat import OpenAICompatibleModel

        return OpenAICompatibleModel(
            base_url=config.base_url,
            api_key=key or "",
            default_model=config.default_model or "",
            timeout=config.timeout_seconds,
            profile=profile.name,
            credential_setting=_setting(profile),
            max_output_tokens=config.max_output_tokens,
        )
    if config.kind == "anthropic":
        from app.runtime.models.anthropic import AnthropicModel

        return AnthropicModel(profile.name, config, key or "", credential_setting=_setting(profile))
    from app.runtime.models.gemini import GeminiModel

    return GeminiModel(profile.name, config, key or "", credential_setting=_setting(profile))


def _setting(profile: Profile) -> str | None:
    return profile.credential.setting if profile.credential is not None else None


class ModelRegistry:
    """Profiles by name, and their clients."""

    def __init__(
        self,
        profiles: Mapping[str, Profile],
        *,
        clients: Mapping[str, ModelClient] | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        # Fixed clients (tests, embedders): used as given, never rebuilt.
        self._fixed = dict(clients or {})
        self._built: dict[str, tuple[str, ModelClient]] = {}

    @classmethod
    def of_clients(cls, clients: Mapping[str, ModelClient]) -> ModelRegistry:
        """A registry serving the given clients, each as a profile of its own name."""
        profiles = {name: Profile(name, ProfileConfig(kind="scripted"), None) for name in clients}
        return cls(profiles, clients=clients)

    def names(self) -> list[str]:
        return sorted(self._profiles)

    def listing(self) -> list[dict[str, Any]]:
        """Every profile as `GET /v1/models` shows it (no secrets)."""
        return [self._profiles[name].to_json() for name in self.names()]

    def check(self, name: str) -> Profile:
        """The profile `name`, if it exists and is configured.

        Raises:
            UnknownModelProfile: no profile has this name (422).
            ModelProfileNotConfigured: its credential is not set (422, names the setting).
        """
        profile = self._profiles.get(name)
        if profile is None:
            raise UnknownModelProfile(name, self.names())
        if name not in self._fixed:
            missing = profile.missing()
            if missing is not None:
                raise ModelProfileNotConfigured(name, missing)
        return profile

    def client(self, name: str) -> ModelClient:
        """The client of profile `name` (wrapped in its retry policy). Raises like `check`."""
        profile = self.check(name)
        fixed = self._fixed.get(name)
        if fixed is not None:
            return fixed
        key = profile.secret()
        # Only a digest of the key is kept beside the client, to notice a rotation.
        fingerprint = hashlib.sha256((key or "").encode()).hexdigest()
        built = self._built.get(name)
        if built is None or built[0] != fingerprint:
            inner = build_client(profile, key)
            client: ModelClient = inner
            if profile.kind != "scripted":
                client = RetryingModel(inner, profile=name, policy=profile.config.retry)
            built = (fingerprint, client)
            self._built[name] = built
        return built[1]

    def kind(self, name: str) -> str:
        """The profile's kind (a bounded metrics label), or the name for unknown ones."""
        profile = self._profiles.get(name)
        return profile.kind if profile is not None else name

    def default_model(self, name: str) -> str | None:
        profile = self._profiles.get(name)
        return profile.config.default_model if profile is not None else None
