"""The benchmark suite: `python -m bench [--db pg|sqlite|both] [--quick] [--only A,B]
[--scale] [--json PATH]`.

Every figure is printed next to its raw baseline measured in the same run (the bare driver
for store operations, a bare FastAPI endpoint for HTTP, one subscriber for SSE fan-out), and
the ratio between them is what to compare across machines. Each figure is the median of
`repeats` measurements. Everything talks to 127.0.0.1 only and is bounded in size and time.
Prints a JSON document on stdout, then a markdown table; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Figure, Sizes, create_database, drop_database, migrate

BENCHES = (
    "append_seq",
    "append_conc",
    "append_batch",
    "load_full",
    "load_state",
    "fork",
    "runtime",
    "runtime_reads",
    "http_run",
    "sse_fanout",
    "cancel_cross_replica",
    "delta_fanout",
    "scale",
    "erase_tenant",
    "inflight",
    "prune",
)

# (figure name prefix, check on the figure, the target as text) — PostgreSQL only.
TARGETS: list[tuple[str, str]] = [
    ("append_seq", "ratio >= 0.7"),
    ("append_conc", "ratio >= 0.6"),
    ("load_state_100000", "value <= 3 ms, and <= 2x load_state_100"),
    ("load_full_20000", "ratio <= 1.3"),
    ("fork_latest_20000", "ratio <= 2"),
    ("fork_mid_20000", "ratio <= 2"),
    ("rt_append_seq", "ratio >= 0.7 (SQLite: >= 0.5)"),
    ("rt_append_conc", "ratio >= 1.0 (SQLite: >= 0.5)"),
    ("rt_read_full_20000", "ratio <= 1.2"),
    ("rt_fork_latest_20000", "ratio <= 1.5"),
    ("http_run_fresh", "ratio >= 0.5 of the same-writes handler, p99 <= 3x p50"),
    ("http_run_1000", "<= 1.2x slower than fresh (runs/s and p99)"),
    ("http_run_stream_cpu", "ratio <= 1.3"),
    ("http_run_workers2", "ratio >= 1.5 (2 cores)"),
    ("sse_fanout_500", "p99 < 100 ms"),
    ("cancel_cross_replica", "p99 < 1 s (cancel on B -> waiting client on A released)"),
    ("delta_fanout", "remote p99 < 100 ms, 0 deltas missing or out of order"),
    ("inflight_wait_1000ms_100", ">= 90 runs/s, p99 <= 1.5 s, <= 5 ms server CPU per run"),
    ("inflight_stream_100", "ratio >= 0.95, cpu_ratio <= 1.5"),
    ("scale_append_seq", "within 1.5x of the small table"),
    ("scale_load_state_100000", "within 1.5x of the small table"),
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


async def run_backend(backend: str, args: argparse.Namespace, sizes: Sizes) -> dict[str, Any]:
    from bench.store_bench import StoreBench

    only = set(args.only)
    workdir = Path(tempfile.mkdtemp(prefix=f"asr-bench-{backend}-"))
    url = await create_database(backend, workdir)
    log(f"== {backend}: {url.split('@')[-1]}")
    figures: list[Figure] = []
    notes: dict[str, Any] = {"load_before": _load()}
    started = time.perf_counter()
    try:
        await migrate(url)
        bench = StoreBench(url, sizes, log)
        await bench.open()
        try:
            small: dict[str, Figure] = {}

            def add(found: list[Figure]) -> None:
                for f in found:
                    log(f"  {f.name}: {f.value:.3f} {f.unit} vs {f.baseline} ({f.ratio})")
                    figures.append(f)
                    small[f.name] = f

            if "append_seq" in only or "scale" in only:
                add([await bench.append_seq()])
            if "append_conc" in only:
                add([await bench.append_conc()])
            if "append_batch" in only:
                add(await bench.append_batch())
            if only & {"load_full", "load_state", "fork", "scale"}:
                await bench.prepare_loads()
            if "load_full" in only:
                add(await bench.load_full())
            if "load_state" in only or "scale" in only:
                add(await bench.load_state())
            if "fork" in only:
                add(await bench.fork())
            if only & {"runtime", "runtime_reads"}:
                from bench.runtime_bench import RuntimeBench

                rt = RuntimeBench(bench.store, bench.raw, bench.tenant, sizes)
                add(await rt.run(log, appends="runtime" in only))
            if "http_run" in only:
                from bench.http_run import http_run

                add(await http_run(url, sizes, log, workdir))
            if "sse_fanout" in only:
                from bench.sse_run import sse_fanout_figures

                add(await sse_fanout_figures(url, sizes, log))
            if "cancel_cross_replica" in only:
                if backend == "pg":
                    from bench.cancel_cross import cancel_cross_replica

                    add(await cancel_cross_replica(url, sizes, log, workdir))
                else:
                    log("  cancel_cross_replica: PostgreSQL only (replicas share one database)")
            if "delta_fanout" in only and backend == "pg":
                from bench.delta_run import delta_fanout_figures

                add(await delta_fanout_figures(url, sizes, log))
            if "scale" in only:
                add(await bench.scale(small))
            if "inflight" in only:
                from bench.inflight import inflight

                add(await inflight(url, sizes, log, workdir))
            if "erase_tenant" in only:
                from bench.erasure_bench import erase_tenant_figure

                add([await erase_tenant_figure(bench.store, bench.runtime, sizes, log)])
            if "prune" in only:
                from bench.prune_bench import prune_figure

                add([await prune_figure(bench.store, bench.runtime, sizes, log)])
        finally:
            await bench.close()
    finally:
        await drop_database(url)
    notes["load_after"] = _load()
    notes["seconds"] = round(time.perf_counter() - started, 1)
    return {
        "backend": backend,
        "figures": [f.to_json() for f in figures],
        **notes,
    }


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def markdown(doc: dict[str, Any]) -> str:
    lines = []
    for result in doc["results"]:
        lines.append(
            f"\n### {result['backend']} (load {result['load_before']} -> {result['load_after']},"
            f" {result['seconds']} s)\n"
        )
        lines.append("| benchmark | measured | raw baseline | ratio | baseline is |")
        lines.append("| --- | ---: | ---: | ---: | --- |")
        for f in result["figures"]:
            extra = f.get("extra") or {}
            measured = _fmt(f["value"], f["unit"])
            base = _fmt(f["baseline"], f["unit"])
            if "p99_ms" in extra:
                measured += f" (p50 {_fmt(extra['p50_ms'])} / p99 {_fmt(extra['p99_ms'])} ms)"
            if "baseline_p99_ms" in extra:
                base += f" (p99 {_fmt(extra['baseline_p99_ms'])} ms)"
            ratio = "-" if f["ratio"] is None else f"{f['ratio']:.2f}x"
            lines.append(f"| {f['name']} | {measured} | {base} | {ratio} | {f['baseline_label']} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--db", choices=("pg", "sqlite", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition (CI)")
    parser.add_argument(
        "--only",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=None,
        help="comma-separated: " + ",".join(BENCHES),
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="add the scale check to --only (without --only, every benchmark runs, scale too)",
    )
    parser.add_argument("--json", dest="json_path", default=None, help="also write JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.only is None:
        args.only = list(BENCHES)  # full and quick mode both include the scale check
    elif args.scale and "scale" not in args.only:
        args.only.append("scale")
    unknown = set(args.only) - set(BENCHES)
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    sizes = Sizes.quick() if args.quick else Sizes()
    backends = (
        ["postgresql", "sqlite"]
        if args.db == "both"
        else ["postgresql" if args.db == "pg" else "sqlite"]
    )
    backends = ["pg" if b == "postgresql" else b for b in backends]
    results = []
    for backend in backends:
        results.append(asyncio.run(run_backend(backend, args, sizes)))
    doc = {
        "mode": "quick" if args.quick else "full",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "repeats": sizes.repeats,
        "results": results,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    print(markdown(doc))
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
