"""The per-tenant session cap, checked without counting the tenant's sessions at every create.

Counting is a scan of the tenant's sessions: it grows with the tenant, and near the default
cap it is tens of thousands of index entries for every session created. A count well below
the cap stays good for a while, since one create moves it by one: within `trust_seconds` of
a count, and while that count plus this process's creates since is below the cap by more
than a tenth of it, a create is admitted without counting again. Near the cap, every create
counts, as before. The cap is no less exact for it: creates racing on several replicas could
always pass it together, and a count taken here can only be too high for a while (sessions
deleted since), which makes the next create count again, never refuses one wrongly.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

# Past this many tenants remembered, the memory starts over (a count is cheap to take again).
_MAX_TENANTS = 4096


class SessionQuota:
    """Admits creates while a tenant is below `cap` sessions (`count` counts them)."""

    def __init__(
        self,
        count: Callable[[str], Awaitable[int]],
        cap: int,
        *,
        trust_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.cap = cap
        self.trust_seconds = trust_seconds
        self.clock = clock
        # Below `cap - headroom` a recent count is trusted; a cap under ten is always counted.
        self.headroom = max(1, cap // 10)
        # tenant -> (sessions counted, plus this process's creates since; when counted)
        self._known: dict[str, tuple[int, float]] = {}

    async def admits(self, tenant_id: str) -> bool:
        """Whether the tenant may create one more session."""
        now = self.clock()
        known = self._known.get(tenant_id)
        if (
            known is not None
            and now - known[1] < self.trust_seconds
            and known[0] < self.cap - self.headroom
        ):
            return True
        counted = await self.count(tenant_id)
        if len(self._known) >= _MAX_TENANTS:
            self._known.clear()
        self._known[tenant_id] = (counted, now)
        return counted < self.cap

    def created(self, tenant_id: str) -> None:
        """One session more for the tenant, made here since its last count."""
        known = self._known.get(tenant_id)
        if known is not None:
            self._known[tenant_id] = (known[0] + 1, known[1])
