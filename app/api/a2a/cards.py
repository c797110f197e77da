"""Agent Cards: one per agent (the default agent, and each blueprint), built per request from
the URL the client reached us at, so a card names an endpoint the client can call.

The public card says how to call the agent (its JSON-RPC endpoint), that it streams and
sends push notifications, and that calls need one of our bearer keys. The extended card
(`GetExtendedAgentCard`, with a key) adds the agent's tools as skills.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.blueprints import Blueprints

SCHEME = "bearer"
VERSION = "0.1.0"
DEFAULT_NAME = "Agent Session Runtime"


# The HTTP+JSON binding's base, under the agent's JSON-RPC endpoint (`/a2a/rest`).
REST_SUFFIX = "/rest"


def rpc_path(agent_name: str | None) -> str:
    """The JSON-RPC endpoint of an agent (the default agent's is `/a2a`)."""
    return "/a2a" if agent_name is None else f"/a2a/{agent_name}"


class CardMaker:
    """The card of one agent as reached at `base_url` (scheme, host and root path)."""

    def __init__(self, blueprints: Blueprints, agent_name: str | None, base_url: str) -> None:
        self.agent_name = agent_name
        self.base_url = base_url.rstrip("/")
        self.spec = blueprints.spec(agent_name) if agent_name else AgentSpec()
        self.description = next(
            (b.description for b in blueprints.list() if b.name == agent_name), None
        )

    def card(self, *, extended: bool = False) -> AgentCard:
        name = self.agent_name or DEFAULT_NAME
        description = self.description or (
            f"The agent {self.agent_name!r} of this Agent Session Runtime."
            if self.agent_name
            else "The default agent of this Agent Session Runtime: sessions are contexts, "
            "runs are tasks."
        )
        skills = [
            AgentSkill(
                id="chat",
                name="Chat",
                description="Answers a message; a tool that needs approval asks for it "
                '(INPUT_REQUIRED: reply "approve" or a DataPart {"approve": true}).',
                tags=["chat"],
                examples=["hello", "[words:5]"],
            )
        ]
        if extended:
            skills += [
                AgentSkill(
                    id=f"tool:{tool}",
                    name=tool,
                    description=f"The tool {tool}"
                    + (" (needs approval)" if tool in self.spec.approval_required else ""),
                    tags=["tool"],
                )
                for tool in self.spec.tools
            ]
        return AgentCard(
            name=name,
            description=description,
            version=VERSION,
            # The same endpoint answers 0.3's method names too (the card then also carries
            # 0.3's `url` and `preferredTransport` for 0.3 clients). JSON-RPC comes first, the
            # binding a client picks when it speaks both; then HTTP+JSON (1.0's paths).
            supported_interfaces=[
                *(
                    AgentInterface(
                        url=self.base_url + rpc_path(self.agent_name),
                        protocol_binding=TransportProtocol.JSONRPC.value,
                        protocol_version=version,
                    )
                    for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
                ),
                AgentInterface(
                    url=self.base_url + rpc_path(self.agent_name) + REST_SUFFIX,
                    protocol_binding=TransportProtocol.HTTP_JSON.value,
                    protocol_version=PROTOCOL_VERSION_1_0,
                ),
            ],
            provider=AgentProvider(organization="Agent Session Runtime", url=self.base_url),
            documentation_url=self.base_url + "/docs",
            capabilities=AgentCapabilities(
                streaming=True, push_notifications=True, extended_agent_card=True
            ),
            security_schemes={
                SCHEME: SecurityScheme(
                    http_auth_security_scheme=HTTPAuthSecurityScheme(
                        scheme="Bearer",
                        bearer_format="asr_...",
                        description="An API key of this service: `Authorization: Bearer asr_...`",
                    )
                )
            },
            security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain", "application/json"],
            skills=skills,
        )
