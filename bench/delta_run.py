"""Delta fan-out inside the suite (PostgreSQL only): bench/delta_fanout with
`delta_subscribers` subscribers over two replicas during `delta_runs` runs of [words:400].
The figure is the remote subscribers' p99; its baseline, the owner's own subscribers'."""

from __future__ import annotations

import argparse
from typing import Any

from bench import delta_fanout
from bench.common import Figure, Sizes


async def delta_fanout_figures(url: str, sizes: Sizes, log: Any) -> list[Figure]:
    args = argparse.Namespace(
        subscribers=sizes.delta_subscribers, runs=sizes.delta_runs, words=400, database_url=url
    )
    doc = await delta_fanout.main_async(args)
    log(f"  delta_fanout: {doc}")
    remote, owner = doc["remote"], doc["owner"]
    return [
        Figure(
            "delta_fanout",
            "ms p99",
            remote["latency_ms"]["p99"],
            owner["latency_ms"]["p99"],
            "the owner replica's own subscribers, same runs",
            False,
            extra={
                "p50_ms": remote["latency_ms"]["p50"],
                "p99_ms": remote["latency_ms"]["p99"],
                "baseline_p99_ms": owner["latency_ms"]["p99"],
                "max_ms": remote["latency_ms"]["max"],
                "out_of_order": remote["out_of_order"] + owner["out_of_order"],
                "runs_with_text_missing": remote["runs_with_text_missing"]
                + owner["runs_with_text_missing"],
                "frames_remote": remote["frames"],
                "frames_owner": owner["frames"],
            },
        )
    ]
