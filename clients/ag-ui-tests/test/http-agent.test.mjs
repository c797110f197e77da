// Issue #22: the official AG-UI client (@ag-ui/client's HttpAgent) against a live server.
//
//   ASR_URL=http://127.0.0.1:PORT ASR_KEY=asr_... npm test
//
// Every run goes through HttpAgent.runAgent, which verifies the stream with the client's own
// event verification (verifyEvents) and throws on the first event out of protocol order; the
// raw streams are also checked once more with verifyEvents directly.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent, verifyEvents } from "@ag-ui/client";
import { lastValueFrom, toArray } from "rxjs";

const URL_ = process.env.ASR_URL;
const KEY = process.env.ASR_KEY;
if (!URL_ || !KEY) throw new Error("set ASR_URL and ASR_KEY (python -m tests.live_server start DIR)");
const headers = { Authorization: `Bearer ${KEY}` };

function agent(threadId = `t-${randomUUID()}`) {
  return new HttpAgent({ url: `${URL_}/v1/ag-ui`, headers, threadId });
}

/** Run with a subscriber that records every event the client applied. */
async function run(a, params = {}) {
  const events = [];
  const result = await a.runAgent(
    { runId: `r-${randomUUID()}`, ...params },
    { onEvent: ({ event }) => void events.push(event) },
  );
  return { ...result, events, types: events.map((e) => e.type) };
}

function say(a, content) {
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content });
}

const text = (events) =>
  events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");

async function api(path) {
  const reply = await fetch(`${URL_}${path}`, { headers });
  assert.equal(reply.status, 200, `${path}: ${reply.status}`);
  return reply.json();
}

/** The raw stream of one RunAgentInput, verified by the client's own verifyEvents. */
async function verified(a, input) {
  return lastValueFrom(a.run(input).pipe(verifyEvents(false), toArray()));
}

test("streamed text arrives and matches FINAL_OUTPUT", async () => {
  const a = agent();
  say(a, "[words:6]");
  const { types, events, result } = await run(a);
  assert.equal(types[0], "RUN_STARTED");
  assert.equal(types.at(-1), "RUN_FINISHED");
  // Deltas are coalesced (a few frames per interval, not one per word): at least one.
  const contents = types.filter((t) => t === "TEXT_MESSAGE_CONTENT").length;
  assert.ok(contents >= 1 && contents <= 6, `${contents} content events`);
  const streamed = text(events);
  const assistant = a.messages.filter((m) => m.role === "assistant");
  assert.equal(assistant.at(-1).content, streamed);
  assert.equal(result, streamed);
  const ledger = await api(`/v1/sessions/${a.threadId}/events?types=FINAL_OUTPUT`);
  assert.deepEqual(ledger.data.map((e) => e.payload.text), [streamed]);
});

test("a frontend tool round trip completes", async () => {
  const a = agent();
  const tools = [
    {
      name: "pick_color",
      description: "Ask the user for a color.",
      parameters: { type: "object", properties: { hint: { type: "string" } } },
    },
  ];
  say(a, '[tool:pick_color {"hint": "warm"}]');
  const first = await run(a, { tools });
  assert.deepEqual(first.types.slice(-5), [
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "STEP_FINISHED",
    "RUN_FINISHED",
  ]);
  const call = a.messages.at(-1).toolCalls[0];
  assert.equal(call.function.name, "pick_color");
  assert.deepEqual(JSON.parse(call.function.arguments), { hint: "warm" });
  // The frontend runs its tool and sends the result back, as CopilotKit does.
  a.addMessage({ id: `tool-${randomUUID()}`, role: "tool", toolCallId: call.id, content: "red" });
  const second = await run(a, { tools });
  assert.equal(text(second.events), "pick_color returned: red");
  const memory = await api(`/v1/sessions/${a.threadId}/memory`);
  const outputs = memory.items.filter((i) => i.type === "function_call_output");
  assert.deepEqual(outputs, [{ type: "function_call_output", call_id: call.id, output: "red" }]);
});

test("an approval interrupts the run and resume continues it", async () => {
  const a = agent();
  const forwardedProps = { approval_required: ["echo"] };
  say(a, '[tool:echo {"text": "ship it"}]');
  const first = await run(a, { forwardedProps });
  const finished = first.events.at(-1);
  assert.equal(finished.outcome.type, "interrupt");
  assert.equal(a.pendingInterrupts.length, 1);
  const [interrupt] = a.pendingInterrupts;
  assert.equal(interrupt.reason, "tool_approval");
  // The client itself refuses a new run that leaves the interrupt unaddressed.
  await assert.rejects(run(a, { forwardedProps }), /pending interrupt/);
  const resume = [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }];
  const second = await run(a, { forwardedProps, resume });
  assert.ok(second.types.includes("TOOL_CALL_RESULT"));
  assert.equal(second.events.at(-1).outcome.type, "success");
  assert.match(text(second.events), /echo returned/);
  assert.equal(a.pendingInterrupts.length, 0);
});

test("the client's own verification accepts every kind of stream", async () => {
  const a = agent();
  const base = { threadId: a.threadId, tools: [], context: [], state: {}, forwardedProps: {} };
  const inputs = [
    { messages: [{ id: "v1", role: "user", content: "[words:3]" }] },
    {
      messages: [{ id: "v2", role: "user", content: '[tool:arithmetic {"op": "add", "a": 2, "b": 3}]' }],
    },
    { messages: [{ id: "v3", role: "user", content: "[continue:2]" }] },
    { messages: [{ id: "v4", role: "user", content: "[ask]" }] },
  ];
  const streams = [];
  for (const input of inputs) {
    const events = await verified(a, { ...base, ...input, runId: `r-${randomUUID()}` });
    assert.equal(events[0].type, "RUN_STARTED");
    assert.equal(events.at(-1).type, "RUN_FINISHED", JSON.stringify(events.at(-1)));
    streams.push(events);
  }
  // The server tool's result streams as TOOL_CALL_RESULT, then the answer that uses it.
  const result = streams[1].find((e) => e.type === "TOOL_CALL_RESULT");
  assert.equal(result.content, "5");
  assert.equal(text(streams[1]), "arithmetic returned: 5");
  // Auto-continue: several model turns, each a step.
  assert.equal(streams[2].filter((e) => e.type === "STEP_STARTED").length, 3);
  const failed = await verified(a, {
    ...base,
    runId: `r-${randomUUID()}`,
    messages: [{ id: "v5", role: "user", content: "[fail]" }],
  });
  assert.equal(failed.at(-1).type, "RUN_ERROR");
});

test("sending the same history twice appends nothing", async () => {
  const a = agent();
  say(a, "one");
  await run(a);
  say(a, "two");
  const runId = `r-${randomUUID()}`;
  await run(a, { runId });
  const before = await api(`/v1/sessions/${a.threadId}/memory`);
  const runsBefore = await api(`/v1/sessions/${a.threadId}/runs`);
  // The same runId again: the same run is streamed again, no second one starts.
  const replay = await verified(a, {
    threadId: a.threadId,
    runId,
    messages: a.messages,
    tools: [],
    context: [],
    state: {},
    forwardedProps: {},
  });
  assert.equal(text(replay), "echo: two");
  const after = await api(`/v1/sessions/${a.threadId}/memory`);
  assert.deepEqual(after.items, before.items);
  assert.equal((await api(`/v1/sessions/${a.threadId}/runs`)).data.length, runsBefore.data.length);
  // The whole history again under a new runId: none of its messages is appended again.
  await run(a);
  const again = await api(`/v1/sessions/${a.threadId}/memory`);
  const users = again.items.filter((i) => i.role === "user").map((i) => i.content);
  assert.deepEqual(users, ["one", "two"]);
});

test("a client that lost the history gets it back as MESSAGES_SNAPSHOT", async () => {
  const first = agent();
  say(first, "one");
  await run(first);
  // A reloaded page: a new HttpAgent on the same thread, with only its new message.
  const reloaded = agent(first.threadId);
  say(reloaded, "two");
  const { types } = await run(reloaded);
  assert.deepEqual(types.slice(0, 2), ["RUN_STARTED", "MESSAGES_SNAPSHOT"]);
  // The client merges a snapshot into what it holds (its own messages keep their place).
  const seen = reloaded.messages.map((m) => `${m.role}: ${m.content}`).sort();
  assert.deepEqual(seen, ["assistant: echo: one", "assistant: echo: two", "user: one", "user: two"]);
  // Its history, snapshot included, is complete now: the next call appends only the new one.
  say(reloaded, "three");
  const next = await run(reloaded);
  assert.ok(!next.types.includes("MESSAGES_SNAPSHOT"));
  const memory = await api(`/v1/sessions/${first.threadId}/memory`);
  const users = memory.items.filter((i) => i.role === "user").map((i) => i.content);
  assert.deepEqual(users, ["one", "two", "three"]);
});
