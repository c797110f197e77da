"""Runs: one user request driven to a stop reason, on whichever replica holds its lease.

`manager` starts, waits for, cancels and closes runs; `plan` turns a request and the
session's agent spec into what the loop runs with; `execute` drives the loop in this
process and writes what it decides; `lease` keeps ownership (heartbeat, the claim of a
queued run) and `sweep` takes over runs whose owner died; `answers` are the writes a client
makes between runs (tool results, approvals).
"""
