"""Request and response examples of every operation, for the OpenAPI document.

They show one coherent story -- the session `demo` of user alice, one run that answered
"echo: hello" -- so a reader of /docs can follow the calls in order.
`tests/api/openapi/test_contract.py` validates every example against the model it
illustrates, so an example cannot drift from the schema.
"""

from __future__ import annotations

import json
from typing import Any

from app.api.a2a.schema import RPC_OPERATION

CREATED = "2026-05-01T12:00:00.000000Z"
LATER = "2026-05-01T12:00:01.250000Z"
SID = "demo"
RUN_ID = "run_01HZX3J8Q3V2C7"
USAGE = {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}

SUMMARY: dict[str, Any] = {
    "session_id": SID,
    "root_session_id": SID,
    "parent_session_id": None,
    "forked_from_seq": None,
    "status": "active",
    "metadata": {"user": "alice"},
    "agent": {"provider": "scripted"},
    "binding": {"workspace": "repo-a"},
    "last_seq": 11,
    "version": 11,
    "active_run_id": None,
    "created_at": CREATED,
    "updated_at": LATER,
    "expires_at": None,
    "idle_ttl_seconds": 2_592_000,
}
SESSION: dict[str, Any] = {
    **SUMMARY,
    "counts": {
        "items": 2,
        "messages": 2,
        "function_calls": 0,
        "function_call_outputs": 0,
        "processes": 0,
    },
    "estimated_tokens": 9,
    "has_summary": False,
    "truncated": False,
    "max_items": None,
    "last_compact": None,
    "breaker": {"failures": 0, "open": False},
    "usage": USAGE,
}
NEW_SESSION = {
    **SESSION,
    "last_seq": 1,
    "version": 1,
    "updated_at": CREATED,
    "counts": {**SESSION["counts"], "items": 0, "messages": 0},
    "estimated_tokens": 0,
    "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
}
EVENT: dict[str, Any] = {
    "event_id": "evt_01HZX3J8Q3V2C7A",
    "session_id": SID,
    "seq": 2,
    "type": "MEMORY_ITEMS_APPENDED",
    "run_id": None,
    "turn_id": None,
    "payload": {"items": [{"type": "message", "role": "user", "content": "hello"}]},
    "created_at": CREATED,
    "position": 42,
}
MEMORY = {"items": [{"type": "message", "role": "user", "content": "hello"}], "summary": None}
STATE: dict[str, Any] = {
    "format": 1,
    "session_id": SID,
    "seq": 2,
    "version": 2,
    "memory": MEMORY,
    "max_items": None,
    "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
    "last_compact": None,
    "breaker": {"failures": 0, "open": False},
    "shared_state": {},
}
RUN: dict[str, Any] = {
    "run_id": RUN_ID,
    "session_id": SID,
    "status": "finished",
    "stop_reason": "COMPLETED",
    "output": "echo: hello",
    "error": None,
    "turns": 1,
    "usage": USAGE,
    "first_seq": 3,
    "last_seq": 11,
    "created_at": CREATED,
    "started_at": CREATED,
    "finished_at": LATER,
    "pending": [],
}
QUEUED_RUN = {
    **RUN,
    "status": "queued",
    "stop_reason": None,
    "output": None,
    "turns": 0,
    "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
    "last_seq": 4,
    "started_at": None,
    "finished_at": None,
}
ASKING_RUN = {
    **RUN,
    "stop_reason": "NEEDS_USER_INPUT",
    "output": None,
    "pending": [
        {"call_id": "call_1", "name": "lookup", "arguments": '{"q": "x"}', "kind": "client"}
    ],
}
PROCESS: dict[str, Any] = {
    "process_id": "proc_01HZX3",
    "session_id": SID,
    "pid": 4242,
    "command": ["sleep", "30"],
    "workspace": "repo-a",
    "run_id": None,
    "status": "running",
    "exit_code": None,
    "reason": None,
    "output_bytes": 0,
    "started_at": CREATED,
    "finished_at": None,
    "live": True,
}
STREAM = (
    "retry: 2000\n\n"
    f'id: 3\nevent: RUN_STARTED\ndata: {{"seq": 3, "type": "RUN_STARTED", "run_id": "{RUN_ID}", '
    "...}\n\n"
    'event: delta\ndata: {"type": "delta", "text": "echo: "}\n\n'
    f'id: 11\nevent: RUN_FINISHED\ndata: {{"seq": 11, "type": "RUN_FINISHED", "payload": '
    '{"status": "finished", "stop_reason": "COMPLETED"}, ...}\n\n'
)
TIMELINE = (
    "retry: 2000\n\n"
    'id: 1\nevent: SESSION_CREATED\ndata: {"seq": 1, "type": "SESSION_CREATED", ...}\n\n'
    ": ping\n\n"
    'event: overflow\ndata: {"resume_after": "1", "detail": "this client fell too far behind; '
    'reconnect with Last-Event-ID"}\n\n'
)

AG_UI_INPUT = {
    "threadId": "thread-1",
    "runId": "run-1",
    "messages": [{"id": "msg-1", "role": "user", "content": "hello"}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}
AG_UI_STREAM = (
    'data: {"type":"RUN_STARTED","threadId":"thread-1","runId":"run-1"}\n\n'
    'data: {"type":"STEP_STARTED","stepName":"turn 1"}\n\n'
    'data: {"type":"TEXT_MESSAGE_START","messageId":"asr_msg_t1","role":"assistant"}\n\n'
    'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"asr_msg_t1","delta":"echo: hello"}\n\n'
    'data: {"type":"TEXT_MESSAGE_END","messageId":"asr_msg_t1"}\n\n'
    'data: {"type":"STEP_FINISHED","stepName":"turn 1"}\n\n'
    'data: {"type":"RUN_FINISHED","threadId":"thread-1","runId":"run-1",'
    '"result":"echo: hello","outcome":{"type":"success"}}\n\n'
)
AG_UI_FRAMES = {
    "type": "object",
    "description": "AG-UI events (https://docs.ag-ui.com), one per `data:` line: RUN_STARTED "
    "first, then steps, text, reasoning and tool call events, and RUN_FINISHED (outcome "
    "`success`, `interrupt` or `cancelled`) or RUN_ERROR last. Comment lines are heartbeats.",
}
AG_UI = {
    "request": AG_UI_INPUT,
    "responses": {},
    "stream": AG_UI_STREAM,
    "stream_schema": AG_UI_FRAMES,
}

AG_UI_CONNECT_STREAM = (
    'id: 14\ndata: {"type":"RUN_STARTED","threadId":"thread-1","runId":"run_01HZX3"}\n\n'
    'id: 14\ndata: {"type":"MESSAGES_SNAPSHOT","messages":[{"id":"msg-1","role":"user",'
    '"content":"hello"}]}\n\n'
    'id: 14\ndata: {"type":"STATE_SNAPSHOT","snapshot":{}}\n\n'
    'id: 14:5\ndata: {"type":"TEXT_MESSAGE_START","messageId":"asr_msg_t1","role":"assistant"}'
    "\n\n"
    'id: 14:5\ndata: {"type":"TEXT_MESSAGE_CONTENT","messageId":"asr_msg_t1","delta":"echo:"}'
    "\n\n"
    'id: 15\ndata: {"type":"TEXT_MESSAGE_END","messageId":"asr_msg_t1"}\n\n'
    'id: 17\ndata: {"type":"RUN_FINISHED","threadId":"thread-1","runId":"run_01HZX3",'
    '"outcome":{"type":"success"}}\n\n'
)
AG_UI_CONNECT = {
    "request": {"threadId": "thread-1"},
    "responses": {},
    "stream": AG_UI_CONNECT_STREAM,
    "stream_schema": {
        "type": "object",
        "description": "AG-UI events, one per `data:` line, each with an `id:` to resume "
        "from (Last-Event-ID): RUN_STARTED, MESSAGES_SNAPSHOT, STATE_SNAPSHOT, the tool calls "
        "that wait (TOOL_CALL_START/ARGS/END), then the active run's remaining events, and "
        "RUN_FINISHED (outcome `interrupt` for approvals that wait) or RUN_ERROR last.",
    },
}
AG_UI_STOP = {
    "request": {"threadId": "thread-1", "runId": "run-1"},
    "responses": {
        200: {
            "stopped": True,
            "threadId": "thread-1",
            "asrRunId": RUN_ID,
            "status": "interrupted",
        }
    },
}

# Parameters by name, wherever they appear. No Idempotency-Key or If-Match here: fuzzers
# send examples as they are, and one key on every request would be a reused key.
PARAMETERS: dict[str, Any] = {
    "session_id": SID,
    "run_id": RUN_ID,
    "process_id": "proc_01HZX3",
    "after_seq": 0,
    "limit": 50,
    "Last-Event-ID": "11",
    "webhook_id": "wh_6f1c2d9a8b7e4f30a1b2c3d4e5f60718",
    "delivery_id": "0b6f8e7a-3c1d-4f2a-9e8b-7c6d5e4f3a21",
    "tenant_id": "t_3f9a1c",
}

WEBHOOK: dict[str, Any] = {
    "webhook_id": "wh_6f1c2d9a8b7e4f30a1b2c3d4e5f60718",
    "url": "https://backend.example.com/hooks/asr",
    "event_types": ["RUN_FINISHED", "APPROVAL_REQUESTED"],
    "session_id": None,
    "metadata_filter": {"user": "alice"},
    "description": "notify the support backend",
    "state": "active",
    "disabled_reason": None,
    "consecutive_failures": 0,
    "last_success_at": LATER,
    "last_failure_at": None,
    "created_at": CREATED,
    "updated_at": LATER,
}
DELIVERY: dict[str, Any] = {
    "delivery_id": "0b6f8e7a-3c1d-4f2a-9e8b-7c6d5e4f3a21",
    "webhook_id": WEBHOOK["webhook_id"],
    "session_id": SID,
    "seq": 11,
    "event_type": "RUN_FINISHED",
    "status": "delivered",
    "attempts": 1,
    "next_attempt_at": None,
    "last_attempt_at": LATER,
    "last_error": None,
    "response_code": 204,
    "delivered_at": LATER,
    "created_at": LATER,
}

SCHEDULE: dict[str, Any] = {
    "schedule_id": "sch_01HZX3J8Q3V2C7",
    "session_id": None,
    "agent_name": "helper",
    "input": "summarise what changed today",
    "cron": "0 18 * * 1-5",
    "timezone": "Europe/Paris",
    "interval_seconds": None,
    "missed": "skip",
    "multitask": "skip",
    "status": "active",
    "metadata": {"team": "docs"},
    "next_fire_at": "2026-05-01T16:00:00.000000Z",
    "last_fired_at": None,
    "version": 1,
    "created_at": CREATED,
    "updated_at": CREATED,
}
FIRE: dict[str, Any] = {
    "schedule_id": SCHEDULE["schedule_id"],
    "tick_at": CREATED,
    "trigger": "manual",
    "outcome": "started",
    "reason": None,
    "ticks": 1,
    "run_id": RUN_ID,
    "session_id": "b6a1c0de-0000-4000-8000-000000000001",
    "created_at": CREATED,
}

RETENTION_POLICY: dict[str, Any] = {
    "tenant_id": "t_3f9a1c",
    "idle_days": 90,
    "prune": True,
    "prune_min_events": 5000,
    "stored": True,
    "updated_at": CREATED,
}

# operation (route function name) -> {"request": body example, "responses": {status: example}}
TENANT_RECEIPT: dict[str, Any] = {
    "receipt_id": "er_20260501120500000000_5f0c2a91",
    "tenant_id": "t_3f9a1c",
    "scope": "tenant",
    "session_id": None,
    "requested_by": "admin-api:ticket-4411",
    "erased_at": "2026-05-01T12:05:00.000000Z",
    "counts": {"api_keys": 1, "runs": 3, "session_events": 42, "sessions": 2, "tenants": 1},
}
SESSION_RECEIPT: dict[str, Any] = {
    **TENANT_RECEIPT,
    "receipt_id": "er_20260501120200000000_9b1e44d0",
    "scope": "session",
    "session_id": SID,
    "requested_by": "key:asr_k1a2b3",
    "erased_at": "2026-05-01T12:02:00.000000Z",
    "counts": {"runs": 1, "session_events": 11, "sessions": 1, "sessions_erased": 1},
}
# The shared state of `demo`: a to-do list its page and its model both edit.
SHARED_STATE: dict[str, Any] = {"title": "Release", "todos": [{"title": "plan", "done": False}]}

OPERATIONS: dict[str, dict[str, Any]] = {
    "create_webhook": {
        "request": {
            "url": WEBHOOK["url"],
            "event_types": WEBHOOK["event_types"],
            "metadata_filter": {"user": "alice"},
            "description": WEBHOOK["description"],
        },
        "responses": {
            201: {**WEBHOOK, "last_success_at": None, "secret": "whsec_" + "c2VjcmV0" * 5 + "c2U="}
        },
    },
    "list_webhooks": {"responses": {200: {"data": [WEBHOOK], "next_cursor": None}}},
    "get_webhook": {"responses": {200: WEBHOOK}},
    "patch_webhook": {
        "request": {"state": "disabled"},
        "responses": {
            200: {**WEBHOOK, "state": "disabled", "disabled_reason": "disabled_by_tenant"}
        },
    },
    "delete_webhook": {"responses": {}},
    "list_webhook_deliveries": {"responses": {200: {"data": [DELIVERY], "next_cursor": None}}},
    "get_webhook_delivery": {"responses": {200: DELIVERY}},
    "redeliver_webhook_delivery": {
        "responses": {202: {**DELIVERY, "status": "pending", "next_attempt_at": LATER}}
    },
    "create_session": {
        "request": {
            "session_id": SID,
            "metadata": {"user": "alice"},
            "binding": {"workspace": "repo-a"},
        },
        "responses": {201: NEW_SESSION},
    },
    "list_sessions": {"responses": {200: {"data": [SUMMARY], "next_cursor": None}}},
    "get_session": {"responses": {200: SESSION}},
    "patch_session": {
        "request": {"metadata": {"team": "search", "user": None}, "max_items": 200},
        "responses": {200: {**SESSION, "metadata": {"team": "search"}, "max_items": 200}},
    },
    "delete_session": {"responses": {}},
    "append_items": {
        "request": {
            "items": [{"type": "message", "role": "user", "content": "hello"}],
            "expected_seq": 1,
        },
        "responses": {
            201: {
                "session_id": SID,
                "first_seq": 2,
                "last_seq": 2,
                "version": 2,
                "events": [EVENT],
            }
        },
    },
    "get_state": {"responses": {200: STATE}},
    "get_shared_state": {"responses": {200: SHARED_STATE}},
    "patch_shared_state": {
        "request": [
            {"op": "test", "path": "/todos/0/done", "value": False},
            {"op": "replace", "path": "/todos/0/done", "value": True},
            {"op": "add", "path": "/todos/-", "value": {"title": "ship", "done": False}},
        ],
        "responses": {
            200: {
                **SHARED_STATE,
                "todos": [{"title": "plan", "done": True}, {"title": "ship", "done": False}],
            }
        },
    },
    "put_shared_state": {"request": SHARED_STATE, "responses": {200: SHARED_STATE}},
    "save_session": {"responses": {200: {"session_id": SID, "snapshot_seq": 3, "version": 3}}},
    "resume_session": {"request": {"binding": {"workspace": "repo-a"}}, "responses": {200: STATE}},
    "fork_session": {
        "request": {"at_seq": 2, "session_id": "demo-branch"},
        "responses": {
            201: {
                **NEW_SESSION,
                "session_id": "demo-branch",
                "parent_session_id": SID,
                "forked_from_seq": 2,
                "last_seq": 3,
            }
        },
    },
    "restore_session": {"request": {"state": STATE}, "responses": {200: STATE}},
    "get_projection": {
        "responses": {200: {"session_id": SID, "seq": 11, "memory": MEMORY, "equals_live": True}}
    },
    "get_memory": {
        "responses": {
            200: {
                "session_id": SID,
                "seq": 11,
                "truncated": False,
                "covers_seq": [1, 11],
                **MEMORY,
                "max_items": None,
            }
        }
    },
    "compact": {
        "request": {"strategy": "truncate", "keep_last": 10},
        "responses": {
            200: {
                "session_id": SID,
                "seq": 12,
                "result": {"strategy": "truncate", "dropped": 2, "kept": 10},
                "breaker": {"failures": 0, "open": False},
                "estimated_tokens": 120,
                "items": 10,
            }
        },
    },
    "context": {
        "responses": {
            200: {
                "session_id": SID,
                "seq": 11,
                "report": {"budget": 1000, "estimated_tokens": 9, "dropped": 0},
                "items": MEMORY["items"],
                "summary": None,
                "estimate": {
                    "tokens": 9,
                    "heuristic_tokens": 9,
                    "basis": "heuristic",
                    "calibration_key": "scripted/scripted",
                    "ratio": 1.0,
                    "samples": 0,
                },
            }
        }
    },
    "create_run": {
        "request": {"input": "hello", "mode": "wait"},
        "responses": {200: RUN, 202: QUEUED_RUN},
        "stream": STREAM,
    },
    "list_runs": {"responses": {200: {"data": [RUN]}}},
    "run_ag_ui": AG_UI,
    "run_ag_ui_agent": AG_UI,
    "call_agent": RPC_OPERATION,
    "call_blueprint_agent": RPC_OPERATION,
    "connect_ag_ui": AG_UI_CONNECT,
    "stop_ag_ui": AG_UI_STOP,
    "get_run": {"responses": {200: RUN}},
    "cancel_run": {
        "responses": {200: {**RUN, "status": "interrupted", "stop_reason": "INTERRUPTED"}}
    },
    "post_tool_outputs": {
        "request": {"outputs": [{"call_id": "call_1", "output": "found it"}]},
        "responses": {200: RUN, 202: QUEUED_RUN},
        "stream": STREAM,
    },
    "post_approval": {
        "request": {"call_id": "call_2", "decision": "approve"},
        "responses": {200: RUN, 202: QUEUED_RUN},
        "stream": STREAM,
    },
    "get_usage": {
        "responses": {
            200: {
                "session_id": SID,
                "usage": USAGE,
                "runs": [{"run_id": RUN_ID, "usage": USAGE, "turns": 1}],
            }
        }
    },
    "create_oneshot_run": {
        "request": {"input": "hello", "agent": {"provider": "scripted"}},
        "responses": {
            200: {**RUN, "session_id": "b6a1c0de-0000-4000-8000-000000000001"},
            202: {**QUEUED_RUN, "session_id": "b6a1c0de-0000-4000-8000-000000000001"},
        },
        "stream": STREAM,
    },
    "list_processes": {"responses": {200: {"data": [PROCESS]}}},
    "start_process": {"request": {"command": "sleep 30"}, "responses": {201: PROCESS}},
    "get_process": {"responses": {200: PROCESS}},
    "get_process_logs": {
        "responses": {
            200: {
                "process_id": PROCESS["process_id"],
                "status": "exited",
                "offset": 0,
                "next_offset": 6,
                "size": 6,
                "eof": True,
                "data": "hello\n",
            }
        }
    },
    "write_process_stdin": {
        "request": {"data": "hello\n", "eof": True},
        "responses": {200: {"process_id": PROCESS["process_id"], "bytes_written": 6, "eof": True}},
    },
    "stop_process": {
        "responses": {
            200: {
                **PROCESS,
                "status": "exited",
                "exit_code": -15,
                "reason": "stopped",
                "finished_at": LATER,
                "live": False,
            }
        }
    },
    "delegate": {
        "request": {"input": "summarise the README", "metadata": {"task": "docs"}},
        "responses": {
            201: {
                "session": {**SUMMARY, "session_id": "demo-child", "parent_session_id": SID},
                "run": {**RUN, "session_id": "demo-child"},
            }
        },
    },
    "list_tools": {
        "responses": {
            200: {
                "data": [
                    {
                        "name": "echo",
                        "description": "Echo the text back.",
                        "parameters": {
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                            "required": ["text"],
                        },
                        "source": "builtin",
                        "requires_approval": False,
                    }
                ],
                "mcp_servers": [],
            }
        }
    },
    "list_models": {
        "responses": {
            200: {
                "data": [
                    {
                        "name": "claude",
                        "kind": "anthropic",
                        "base_url": None,
                        "default_model": "claude-sonnet-4-5",
                        "credential": "env:ANTHROPIC_API_KEY",
                        "configured": True,
                        "missing": None,
                        "timeout_seconds": 60.0,
                        "retry": {
                            "max_attempts": 3,
                            "initial_backoff_seconds": 0.5,
                            "max_backoff_seconds": 20.0,
                        },
                        "max_output_tokens": 4096,
                        "context_window": None,
                        "thinking_budget_tokens": None,
                    }
                ]
            }
        }
    },
    "list_events": {
        "responses": {200: {"data": [EVENT], "next_after_seq": None}},
        "ndjson": json.dumps(EVENT) + "\n",
    },
    "stream_session_events": {"responses": {}, "stream": TIMELINE},
    "stream_tenant_events": {
        "responses": {},
        "stream": TIMELINE.replace("id: 1\n", "id: c1.42\n"),
    },
    "create_stream_token": {
        "request": {"session_id": SID, "ttl_seconds": 300},
        "responses": {
            201: {"token": "st1.eyJ0IjoiLi4uIn0.sig", "expires_at": LATER, "session_id": SID}
        },
    },
    "list_agents": {
        "responses": {
            200: {
                "data": [
                    {
                        "name": "helper",
                        "description": "Says hello.",
                        "agent": {"provider": "scripted", "tools": ["echo"]},
                    }
                ]
            }
        }
    },
    "list_event_types": {
        "responses": {
            200: {
                "data": [
                    {
                        "type": "FINAL_OUTPUT",
                        "description": "The run's final answer (a completed run only).",
                        "payload_schema": {
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                            "required": ["text"],
                        },
                    }
                ]
            }
        }
    },
    "create_schedule": {
        "request": {
            "agent_name": "helper",
            "input": "summarise what changed today",
            "cron": "0 18 * * 1-5",
            "timezone": "Europe/Paris",
            "metadata": {"team": "docs"},
        },
        "responses": {201: SCHEDULE},
    },
    "list_schedules": {"responses": {200: {"data": [SCHEDULE], "next_cursor": None}}},
    "get_schedule": {"responses": {200: SCHEDULE}},
    "patch_schedule": {
        "request": {"cron": "0 9 * * 1-5"},
        "responses": {200: {**SCHEDULE, "cron": "0 9 * * 1-5", "version": 2}},
    },
    "pause_schedule": {
        "responses": {200: {**SCHEDULE, "status": "paused", "next_fire_at": None, "version": 2}}
    },
    "resume_schedule": {"responses": {200: {**SCHEDULE, "version": 3}}},
    "trigger_schedule": {
        "responses": {
            200: {
                **FIRE,
                "outcome": "skipped",
                "reason": "run_in_progress",
                "run_id": None,
                "session_id": None,
            },
            202: FIRE,
        }
    },
    "list_schedule_runs": {"responses": {200: {"data": [FIRE], "next_cursor": None}}},
    "export_sessions": {
        "responses": {},
        "ndjson": "".join(
            json.dumps(line, separators=(",", ":")) + "\n"
            for line in (
                {
                    "kind": "session",
                    "format": "asr.session-ledger.v1",
                    "session_id": SID,
                    "last_seq": 2,
                    "metadata": {"user": "alice"},
                    "agent": {"provider": "scripted"},
                    "binding": {"workspace": "repo-a"},
                    "root_session_id": SID,
                    "parent_session_id": None,
                    "forked_from_seq": None,
                    "exported_at": LATER,
                },
                {"kind": "event", **EVENT},
                {
                    "kind": "cursor",
                    "cursor": "WyIyMDI2LTA1LTAxVDEyOjAwOjAwKzAwOjAwIiwgImRlbW8iXQ==",
                },
                {"kind": "end", "sessions": 1},
            )
        ),
    },
    "erase_tenant": {"responses": {200: TENANT_RECEIPT}},
    "list_erasures": {
        "responses": {200: {"data": [TENANT_RECEIPT, SESSION_RECEIPT], "next_cursor": None}}
    },
    "get_retention_policy": {"responses": {200: RETENTION_POLICY}},
    "put_retention_policy": {
        "request": {"idle_days": 90, "prune": True, "prune_min_events": 5000},
        "responses": {200: RETENTION_POLICY},
    },
    "run_retention": {
        "responses": {
            200: {
                "dry_run": True,
                "sessions_deleted": [{"tenant_id": "t_3f9a1c", "session_id": "old-chat"}],
                "sessions_pruned": [
                    {
                        "tenant_id": "t_3f9a1c",
                        "session_id": SID,
                        "cut_seq": 9800,
                        "events_removed": 9800,
                        "snapshots_removed": 2,
                    }
                ],
                "events_pruned": 9800,
                "snapshots_deleted": 0,
                "deliveries_deleted": 0,
            }
        }
    },
    "healthz": {"responses": {200: {"status": "ok"}}},
    "readyz": {
        "responses": {
            200: {
                "status": "ok",
                "database": "ok",
                "schema": {"current": "0008", "expected": "0008", "state": "at_head"},
            }
        }
    },
    "metrics": {"responses": {}, "text": "# TYPE asr_runs_total counter\nasr_runs_total 1.0\n"},
}

# Payloads of the webhook examples: the event types a subscriber most often asks for.
DELIVERY_PAYLOADS: dict[str, dict[str, Any]] = {
    "RUN_FINISHED": {"status": "finished", "stop_reason": "COMPLETED", "usage": USAGE, "turns": 1},
    "FINAL_OUTPUT": {"text": "echo: hello"},
}

PROBLEM_CODES = {
    400: ("malformed_json", "Malformed JSON", "the request body is not valid JSON"),
    401: ("unauthorized", "Unauthorized", "missing or invalid API key"),
    404: ("session_not_found", "Not found", "no session 'demo'"),
    409: ("run_in_progress", "Conflict", "a run is already active on this session"),
    412: ("version_conflict", "Precondition failed", "the session is at version 12, not 11"),
    413: ("payload_too_large", "Payload too large", "the body is over 1048576 bytes"),
    422: ("validation_error", "Invalid request", "the request does not match the schema"),
    429: ("too_many_streams", "Too many requests", "100 streams are open for this tenant"),
    502: ("model_error", "Model call failed", "the model provider answered 500"),
    503: ("database_unavailable", "Service unavailable", "the database is unavailable"),
}


def problem_example(status: int, path: str) -> dict[str, Any]:
    """An example problem document for `status` on `path`."""
    code, title, detail = PROBLEM_CODES.get(status, ("http_error", "Error", None))
    return {
        "type": f"urn:asr:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": path.replace("{session_id}", SID).replace("{run_id}", RUN_ID),
        "code": code,
    }
