// Shared state with the official AG-UI client (@ag-ui/client's HttpAgent) against a live server.
//
//   ASR_URL=http://127.0.0.1:PORT ASR_KEY=asr_... npm test
//
// The client's `state` is stored with the run's start; the stream opens with STATE_SNAPSHOT
// and sends a STATE_DELTA (JSON Patch) for each change the run makes, which HttpAgent applies
// to its own copy. That copy must be the object the service stores (GET .../shared-state).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const URL_ = process.env.ASR_URL;
const KEY = process.env.ASR_KEY;
if (!URL_ || !KEY) throw new Error("set ASR_URL and ASR_KEY (python -m tests.live_server start DIR)");
const headers = { Authorization: `Bearer ${KEY}` };

function agent(initialState) {
  return new HttpAgent({ url: `${URL_}/v1/ag-ui`, headers, threadId: `t-${randomUUID()}`, initialState });
}

async function run(a, content) {
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content });
  const events = [];
  await a.runAgent({ runId: `r-${randomUUID()}` }, { onEvent: ({ event }) => void events.push(event) });
  return events;
}

/** The scripted model's directive: one update_state call per patch, in order. */
const patches = (...list) => list.map((p) => `[state:${JSON.stringify(p)}]`).join("");

async function stored(threadId) {
  const reply = await fetch(`${URL_}/v1/sessions/${threadId}/shared-state`, { headers });
  assert.equal(reply.status, 200);
  return reply.json();
}

test("a run that sets state and patches it: STATE_SNAPSHOT, then STATE_DELTAs HttpAgent applies", async () => {
  const a = agent({ todos: [{ title: "plan", done: false }] });
  const events = await run(
    a,
    patches(
      [{ op: "replace", path: "/todos/0/done", value: true }],
      [{ op: "add", path: "/todos/-", value: { title: "ship", done: false } }, { op: "add", path: "/owner", value: "ana" }],
    ),
  );
  const types = events.map((e) => e.type);
  assert.deepEqual(types.slice(0, 2), ["RUN_STARTED", "STATE_SNAPSHOT"]);
  assert.deepEqual(events[1].snapshot, { todos: [{ title: "plan", done: false }] });
  assert.equal(types.filter((t) => t === "STATE_DELTA").length, 2);
  assert.ok(types.indexOf("STATE_DELTA") > types.indexOf("STATE_SNAPSHOT"));
  const expected = { todos: [{ title: "plan", done: true }, { title: "ship", done: false }], owner: "ana" };
  assert.deepEqual(a.state, expected);
  assert.deepEqual(await stored(a.threadId), a.state);

  // The page changes the state itself; the next run stores it and patches on top of it.
  a.setState({ ...a.state, owner: "bo" });
  const next = await run(a, patches([{ op: "remove", path: "/todos/0" }]));
  assert.deepEqual(next.find((e) => e.type === "STATE_SNAPSHOT").snapshot.owner, "bo");
  assert.deepEqual(a.state, { todos: [{ title: "ship", done: false }], owner: "bo" });
  assert.deepEqual(await stored(a.threadId), a.state);
});

test("a page that reloads (empty state) gets the thread's state back in the snapshot", async () => {
  const a = agent({ step: 1 });
  await run(a, patches([{ op: "replace", path: "/step", value: 2 }]));
  const reloaded = new HttpAgent({ url: `${URL_}/v1/ag-ui`, headers, threadId: a.threadId });
  await run(reloaded, "hello again");
  assert.deepEqual(reloaded.state, { step: 2 });
  assert.deepEqual(await stored(a.threadId), { step: 2 });
});

test("a patch of the model that does not apply is a tool error, and the states still agree", async () => {
  const a = agent({ n: 1 });
  const events = await run(a, patches([{ op: "test", path: "/n", value: 2 }]));
  assert.equal(events.filter((e) => e.type === "STATE_DELTA").length, 0);
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.match(events.find((e) => e.type === "TOOL_CALL_RESULT").content, /invalid_patch/);
  assert.deepEqual(a.state, { n: 1 });
  assert.deepEqual(await stored(a.threadId), { n: 1 });
});
