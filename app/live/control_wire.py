"""Run control between replicas: the `asr_control` channel and its payloads.

A message names a run that was just fenced (cancel, interrupt, sweep), so that the replica
executing it aborts its model call or tool at once instead of at its next lease renewal
(which stays the fallback when a message is lost). An erasure rides the same channel
(`erase_session` naming the session in the run's place, `erase_tenant` with `*`), so every
replica drops what it holds of what was erased. The bus sends it (`EventBus.send_control`)
through the store's NOTIFY sender and hears it on its LISTEN connection.
"""

from __future__ import annotations

from app.store.announce import MAX_PAYLOAD_BYTES

CONTROL_CHANNEL = "asr_control"


def encode_control(kind: str, tenant_id: str, run_id: str) -> str | None:
    """`<kind>:<tenant_id>:<run_id>`, or None when it would not fit a NOTIFY payload (then
    the owner learns it at its next lease renewal)."""
    payload = f"{kind}:{tenant_id}:{run_id}"
    return payload if len(payload.encode()) <= MAX_PAYLOAD_BYTES else None


def decode_control(payload: str) -> tuple[str, str, str] | None:
    """(kind, tenant_id, run_id) of a control payload, or None for one that is not ours."""
    kind, _, rest = payload.partition(":")
    tenant_id, _, run_id = rest.partition(":")
    if not kind or not tenant_id or not run_id:
        return None
    return kind, tenant_id, run_id
