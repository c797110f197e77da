// Shared state between a page and the agent, with the official AG-UI client, in Node (no
// browser). From clients/ag-ui-tests, after `npm ci`:
//
//   ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... node examples/shared-state.mjs
//
// The "page" holds a to-do list in the agent's state; the run stores it, the model (the
// scripted one, told by a [state:...] directive) patches it, and HttpAgent applies each
// STATE_DELTA to its own copy, which ends equal to what the service stores.
import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { HttpAgent } from "@ag-ui/client";

const url = process.env.ASR_URL ?? "http://127.0.0.1:8000";
const headers = { Authorization: `Bearer ${process.env.ASR_KEY}` };

const agent = new HttpAgent({
  url: `${url}/v1/ag-ui`,
  headers,
  threadId: `todo-${randomUUID()}`,
  initialState: { todos: [{ title: "write the plan", done: false }] },
});

// A real model decides by itself to call update_state; the scripted one is told to.
const patch = [
  { op: "replace", path: "/todos/0/done", value: true },
  { op: "add", path: "/todos/-", value: { title: "ship it", done: false } },
];
agent.addMessage({ id: randomUUID(), role: "user", content: `Tick the plan off. [state:${JSON.stringify(patch)}]` });

await agent.runAgent({}, {
  onStateSnapshotEvent: ({ event }) => console.log("STATE_SNAPSHOT", JSON.stringify(event.snapshot)),
  onStateDeltaEvent: ({ event }) => console.log("STATE_DELTA   ", JSON.stringify(event.delta)),
});
console.log("the page's state    ", JSON.stringify(agent.state));

const stored = await (await fetch(`${url}/v1/sessions/${agent.threadId}/shared-state`, { headers })).json();
console.log("the service's state ", JSON.stringify(stored));
// Compared as JSON values: a PostgreSQL-backed service may give the keys in another order.
if (!isDeepStrictEqual(stored, agent.state)) {
  console.error("the states differ");
  process.exit(1);
}
