"""R24 in CI's short form: the full harness (tests/load/r24.py), for a short time.

Two replicas, 50 concurrent session workers, each with an SSE subscriber on the other
replica, 20 appends and a scripted run; then the per-session audit (gapless ledger, every
append once, the subscriber saw exactly 1..N). Asserted: no 5xx, no lost or duplicated
event, no traceback, and on PostgreSQL the connection and NOTIFY-queue bounds. Latencies
are printed, not asserted: CI shares 2 cores with the harness. The full form (5 minutes,
with the latency and RSS checks) is `python -m tests.load.r24 --seconds 300` (see docs).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.load.r24 import load, parse_args


async def test_r24_bounded_load_on_two_replicas(database_url: str, tmp_path: Path) -> None:
    seconds = os.environ.get("ASR_R24_SECONDS", "10")
    args = parse_args(["--database-url", database_url, "--seconds", seconds, "--think-ms", "50"])
    result = await load(database_url, args, tmp_path)
    print("R24:", {k: result[k] for k in ("requests", "append_ms", "commit_to_sse_ms")})
    assert result["sessions_done"] >= args.sessions
    checks = result["checks"]
    for name in ("no_5xx", "no_lost_or_duplicate_events", "no_tracebacks"):
        assert checks[name], (name, result["problems"], result["statuses"])
    for name in ("connections_within_pools", "notify_queue_under_1pct"):
        assert checks.get(name, True), (name, result)
