"""SSE fan-out inside the suite: bench/sse_fanout at `sse_subscribers` subscribers (one
subscriber is its baseline, measured first in the same server)."""

from __future__ import annotations

import argparse
from typing import Any

from bench import sse_fanout
from bench.common import Figure, Sizes


async def sse_fanout_figures(url: str, sizes: Sizes, log: Any) -> list[Figure]:
    args = argparse.Namespace(
        subscribers=[sizes.sse_subscribers],
        events=sizes.sse_events,
        rate=100.0,
        producer="items",
        database_url=url,
    )
    doc = await sse_fanout.main_async(args)
    base = doc["baseline"]
    figures = []
    for result in doc["results"]:
        figures.append(
            Figure(
                f"sse_fanout_{result['subscribers']}",
                "ms p99",
                result["latency_ms"]["p99"],
                base["latency_ms"]["p99"],
                "1 subscriber, same server, same producer",
                False,
                extra={
                    "p50_ms": result["latency_ms"]["p50"],
                    "p99_ms": result["latency_ms"]["p99"],
                    "baseline_p99_ms": base["latency_ms"]["p99"],
                    "max_ms": result["latency_ms"]["max"],
                    "missing": result["missing"],
                    "events_per_s_delivered": result["events_per_s_delivered"],
                    "server_rss_mb": result["server_rss_mb"],
                },
            )
        )
    return figures
