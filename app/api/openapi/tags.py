"""The document's tags, in reading order, each with what a reader finds under it.

ReDoc and Swagger UI group operations by tag and show these texts as each group's
introduction, so they say what the group is for and where to start, not what each route does.
"""

from __future__ import annotations

from typing import Any

TAGS: tuple[tuple[str, str], ...] = (
    (
        "sessions",
        "A session is one agent task's durable container: a stable id, its memory, an "
        "append-only event ledger and snapshots. Create one, then run it, save, resume, fork "
        "or compact it. Writes take `If-Match` (the session's version) and `Idempotency-Key`.",
    ),
    (
        "runs",
        "A run is one turn of work by the session's agent: start it and wait for the answer, "
        "stream its events, or let it run in the background and poll it. Any replica can "
        "cancel, answer a tool call or decide an approval of a run another replica executes.",
    ),
    (
        "memory",
        "What the model sees: memory items, the context a model call is given, and compaction "
        "(truncate, summarise, shrink old tool outputs).",
    ),
    (
        "events",
        "The ledger: every change to a session as a typed event, numbered 1, 2, 3, ... with no "
        "gap. Page through it as JSON, or export it whole as NDJSON.",
    ),
    (
        "streams",
        "Server-Sent Events: a session's timeline, a tenant's, or a run's own stream. Reconnect "
        "with `Last-Event-ID` and nothing is lost or repeated; browsers that cannot send "
        "headers use a short-lived stream token.",
    ),
    (
        "ag-ui",
        "The AG-UI protocol over the same runs and ledger, for CopilotKit and other AG-UI "
        "frontends: `threadId` is the session, `runId` the run and its idempotency key.",
    ),
    (
        "a2a",
        "The Agent2Agent (A2A) protocol, for other agents: `contextId` is the session, "
        "`taskId` the run.",
    ),
    (
        "agents",
        "The agent blueprints the operator configured (`ASR_AGENTS_FILE`): a session can be "
        "made from one by name.",
    ),
    ("delegation", "A session hands a task to a child session and follows its run."),
    (
        "schedules",
        "Runs on a cadence (cron in a time zone, or an interval), fired once per tick by "
        "whichever replica claims it, with what to do about missed ticks and busy sessions.",
    ),
    (
        "webhooks",
        "Subscriptions that POST chosen event types to a URL, signed per Standard Webhooks, "
        "retried with backoff, in order per session. The document's `webhooks` section shows "
        "what a receiver gets for each event type.",
    ),
    ("processes", "Long-running commands in a session's workspace, their output and stdin."),
    ("tools", "The tools an agent may be given: built-in ones and those of MCP servers."),
    ("models", "The model profiles the operator configured, and whether each has its key."),
    (
        "operations",
        "For operators: liveness, readiness (database and schema), and Prometheus metrics "
        "(with a bearer token when `ASR_METRICS_TOKEN` is set).",
    ),
)


def describe_tags(document: dict[str, Any]) -> None:
    """Give the document the tags its operations use, with their descriptions."""
    used = {
        tag
        for item in document["paths"].values()
        for op in item.values()
        for tag in op.get("tags", [])
    }
    described = [{"name": name, "description": text} for name, text in TAGS if name in used]
    known = {name for name, _ in TAGS}
    described += [{"name": name} for name in sorted(used - known)]
    document["tags"] = described
