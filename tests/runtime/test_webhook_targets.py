"""SSRF checks of webhook targets (issue #20): what a webhook URL may name, and reach."""

from __future__ import annotations

import pytest

from app.runtime.errors import UnsafeWebhookTarget
from app.runtime.webhooks.targets import TargetPolicy, parse_networks

REFUSED = [
    "http://127.0.0.1/hook",  # loopback
    "http://127.1.2.3:8080/hook",
    "http://[::1]/hook",
    "http://localhost/hook",  # a name that resolves to loopback
    "http://10.0.0.1/hook",  # private (RFC 1918)
    "http://172.16.5.4/hook",
    "http://192.168.1.1/hook",
    "http://[fd00::1]/hook",  # unique local
    "http://169.254.169.254/latest/meta-data/",  # link-local: cloud metadata
    "http://[fe80::1]/hook",
    "http://100.64.0.1/hook",  # shared address space
    "http://0.0.0.0/hook",  # unspecified
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "http://[::ffff:10.0.0.1]/hook",
    "http://224.0.0.1/hook",  # multicast
    "ftp://93.184.216.34/file",  # not http(s)
    "file:///etc/passwd",
    "http://user:pw@93.184.216.34/hook",  # credentials in the URL
    "http:///no-host",
    "http://93.184.216.34:99999/bad-port",
]


@pytest.mark.parametrize("url", REFUSED)
async def test_non_public_and_malformed_targets_are_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookTarget):
        await TargetPolicy().resolve(url)


async def test_a_public_address_is_allowed_and_pinned() -> None:
    target = await TargetPolicy().resolve("https://93.184.216.34:8443/hook?x=1")
    assert str(target.address) == "93.184.216.34" and target.host == "93.184.216.34"
    assert target.connect_url() == "https://93.184.216.34:8443/hook?x=1"


async def test_an_operator_allows_exactly_the_networks_named() -> None:
    policy = TargetPolicy(parse_networks("127.0.0.1/32, 10.20.0.0/16"))
    assert str((await policy.resolve("http://127.0.0.1:9/h")).address) == "127.0.0.1"
    assert str((await policy.resolve("http://10.20.3.4/h")).address) == "10.20.3.4"
    for url in ("http://127.0.0.2/h", "http://10.21.0.1/h", "http://169.254.169.254/"):
        with pytest.raises(UnsafeWebhookTarget):
            await policy.resolve(url)


async def test_a_name_is_refused_if_any_address_it_resolves_to_is() -> None:
    # localhost resolves to loopback (and maybe ::1): allowing 127.0.0.0/8 alone is not
    # enough when it also resolves to ::1, and is enough when it does not.
    policy = TargetPolicy(parse_networks("127.0.0.0/8, ::1/128"))
    target = await policy.resolve("http://localhost:8080/h")
    assert target.address.is_loopback
    assert target.connect_url().startswith(("http://127.", "http://[::1]"))
