"""R22 and issue #18: schemathesis with every check against the live OpenAPI schema, with
each of two tenants' keys (the two SSE timelines never end on their own, so they are left to
tests/sse, which hold them to the SSE contract; a run streamed by POST .../runs is checked
here, frame by frame against the `ServerSentEvent` schema).

No 500, every response matches its documented status, content type, headers and schema, bad
input is rejected and valid input accepted, a missing required header or an unsupported
method is refused, auth is not ignored, deleted resources stay deleted.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.store.stores import Stores
from tests.conftest import ROOT, Server, make_tenant

CHECKS = "all"
# A new Idempotency-Key per request, as a client makes one (see the hooks module).
HOOKS_ENV = {
    **os.environ,
    "SCHEMATHESIS_HOOKS": "tests.e2e.schemathesis_hooks",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
EXAMPLES = os.environ.get("ASR_FUZZ_EXAMPLES", "10")
# Rejections: a 413 from the body limit rejects an oversized (so invalid) body, and a 412
# (If-Match, checked before the body) rejects the request as well; schemathesis's default
# list lacks both. Valid data may still be refused for what no schema can say, on these
# operations only: a list cursor is an opaque token the service issued (422 for one it did
# not); If-Match names a version the fuzzer cannot know (412); `agent_name` must name one of
# this server's blueprints, an agent's `provider` must name one of its model profiles (issue
# #19), `at_seq` must not pass the session's last seq, and a delegation chain may already be
# as deep as allowed (422, facts of the data and of the server's configuration, not of the
# request); a session's `expires_at` valid as an RFC 3339 date-time may name year 0, which
# no datetime holds (422).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "412", "413", "415",
                     "422", "428", "429", "5xx"]

[[operations]]
include-operation-id = ["listSessions", "createSession", "patchSession", "forkSession",
                        "runOnce"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]

# AG-UI (issue #22): a RunAgentInput valid by the protocol's schema may still name a
# blueprint this server lacks, carry tool names or call ids longer than memory keeps, or
# address a thread whose session is busy: 409 or 422, facts beyond the protocol's schema.
[[operations]]
include-operation-id = ["runAgUi", "runAgUiAgent"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]

# Webhooks (issue #20): a URL valid by the schema may name a host that does not resolve or an
# address this server may not call (SSRF: 422), an event type may be outside the vocabulary,
# and a list cursor is an opaque token the service issued.
[[operations]]
include-operation-id = ["createWebhook", "patchWebhook", "listWebhooks", "listWebhookDeliveries"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]

# Schedules (issue #20): a cron expression or a time zone valid by the schema (a string) may
# not be one croniter or the IANA database knows (422 invalid_schedule), the session may not
# exist (404), and a list cursor is the service's own token (422 for one it did not issue).
[[operations]]
include-operation-id = ["createSchedule", "patchSchedule", "listSchedules", "listScheduleRuns"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]

# Shared state: If-Match names a version the fuzzer cannot know (412), and a JSON Patch valid
# by the schema may `test` a value the state does not hold or address a path it lacks (422
# invalid_patch: RFC 6902's own refusals, facts of the stored state).
[[operations]]
include-operation-id = ["patchSharedState", "putSharedState"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "412", "413",
                                                     "422", "429", "5xx"]

# The bulk export's `cursor` and AG-UI connect's `Last-Event-ID` are tokens the service
# issued (422 for one it did not).
[[operations]]
include-operation-id = ["exportSessions", "connectAgUi"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]

# A2A: JSON-RPC answers every call with 200, an invalid one with an A2A error in the body
# (-32700, -32600, -32602, ...), as the protocol says; a blueprint named in the path may not
# exist (422 unknown_agent, for its card too).
[[operations]]
include-operation-id = ["callAgent", "callBlueprintAgent"]
checks.negative_data_rejection.expected-statuses = ["200", "400", "401", "403", "404", "405",
                                                    "406", "409", "413", "415", "422", "429",
                                                    "5xx"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429",
                                                     "5xx"]
[[operations]]
include-operation-id = ["getBlueprintAgentCard"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "404", "422", "5xx"]
[[operations]]
include-operation-id = ["saveSession", "restoreSession", "delegateTask"]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "401", "404", "409", "412", "422", "429", "5xx"
]
"""


@pytest.mark.timeout(600)
async def test_r22_schemathesis_with_two_tenants(
    server: Server, store: Stores, tmp_path: Path
) -> None:
    st = Path(sys.executable).with_name("st")
    (tmp_path / "schemathesis.toml").write_text(CONFIG)  # `st` reads it from its folder
    for label in ("a", "b"):
        tenant = await make_tenant(store)
        result = await asyncio.to_thread(
            subprocess.run,
            [
                str(st),
                "run",
                f"{server.base_url}/openapi.json",
                "-H",
                f"Authorization: Bearer {tenant.key}",
                "--checks",
                CHECKS,
                # The stateful "created resource not found" check follows inferred links
                # from a created session to every route under it; this server's process
                # plane is off, so a session's processes routes answer 404
                # processes_disabled (its configuration, not a lost resource).
                "--exclude-checks",
                "ensure_resource_availability",
                "--max-examples",
                EXAMPLES,
                "--request-timeout",
                "20",
                "--seed",
                "22",
                # The SSE routes never end on their own; their contract has its own tests.
                "--exclude-path-regex",
                "/stream$",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=540,
            cwd=tmp_path,
            env=HOOKS_ENV,
        )
        assert result.returncode == 0, f"tenant {label}:\n{result.stdout[-6000:]}"
        assert "passed" in result.stdout
