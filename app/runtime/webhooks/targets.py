"""Where a webhook may be sent: the SSRF checks, at subscription time and at every attempt.

A webhook URL is the tenant's choice, but the request comes from inside the operator's
network, so by default it may only reach public addresses: loopback, private (RFC 1918, ULA),
link-local (cloud metadata at 169.254.169.254), shared, multicast, reserved and unspecified
addresses are refused, IPv4-mapped IPv6 included. An operator allows more explicitly, by
network (`ASR_WEBHOOK_ALLOW_NETWORKS`, e.g. the tests' 127.0.0.1/32).

A name is resolved and every address it resolves to must be allowed, when the subscription is
made and again at each attempt (a name may be re-pointed, DNS rebinding). The attempt then
connects to the address it checked, not to a second lookup's (`PinnedTarget`). Redirects are
never followed (a 3xx is a failed attempt), so a public URL cannot bounce a delivery inward.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from app.runtime.errors import UnsafeWebhookTarget

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_URL_LENGTH = 2048
RESOLVE_SECONDS = 5.0  # a name that takes longer is refused (a request never waits on DNS)


def parse_networks(raw: str) -> tuple[IPNetwork, ...]:
    """`10.0.0.0/8, 127.0.0.1/32` -> networks (the operator's allowlist)."""
    return tuple(ipaddress.ip_network(part.strip()) for part in raw.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class PinnedTarget:
    """A URL whose host resolved to `address`, which was checked: connect there."""

    url: str
    host: str
    address: IPAddress

    def connect_url(self) -> str:
        """The URL with the checked address in place of the name (Host and SNI keep the
        name)."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        netloc = literal if parts.port is None else f"{literal}:{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


class TargetPolicy:
    """Decides whether a URL, and each address it resolves to, may be called."""

    def __init__(self, allow_networks: tuple[IPNetwork, ...] = ()) -> None:
        self.allow_networks = allow_networks

    def check_url(self, url: str) -> tuple[str, str, int]:
        """The URL's (scheme, host, port) if its form is acceptable; raises otherwise."""
        if len(url) > MAX_URL_LENGTH:
            raise UnsafeWebhookTarget(f"the URL is longer than {MAX_URL_LENGTH} characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise UnsafeWebhookTarget(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise UnsafeWebhookTarget("a webhook URL must be http:// or https://")
        if not parts.hostname:
            raise UnsafeWebhookTarget("a webhook URL must name a host")
        if parts.username is not None or parts.password is not None:
            raise UnsafeWebhookTarget("a webhook URL may not carry credentials")
        if parts.fragment:
            raise UnsafeWebhookTarget("a webhook URL may not have a fragment")
        default = 443 if parts.scheme == "https" else 80
        return parts.scheme, parts.hostname, port or default

    def allowed(self, address: IPAddress) -> bool:
        """Public, or inside a network the operator allowed."""
        if any(address in net for net in self.allow_networks):
            return True
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            return self.allowed(mapped)
        return address.is_global and not address.is_multicast

    async def resolve(self, url: str) -> PinnedTarget:
        """Check the URL, resolve its host, and check every address; the first one is
        pinned. Raises `UnsafeWebhookTarget` (a refused or unresolvable target)."""
        _, host, port = self.check_url(url)
        addresses = await _addresses(host, port)
        refused = [a for a in addresses if not self.allowed(a)]
        if refused:
            raise UnsafeWebhookTarget(
                f"the host {host!r} resolves to an address this server may not call"
                f" ({refused[0]}): loopback, private, link-local and other non-public"
                " addresses are refused unless the operator allows their network"
            )
        return PinnedTarget(url=url, host=host, address=addresses[0])


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_SECONDS):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeWebhookTarget(f"the host {host!r} does not resolve: {exc}") from None
    except TimeoutError:
        raise UnsafeWebhookTarget(f"the host {host!r} did not resolve in time") from None
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if address not in found:
            found.append(address)
    if not found:
        raise UnsafeWebhookTarget(f"the host {host!r} does not resolve")
    return found
