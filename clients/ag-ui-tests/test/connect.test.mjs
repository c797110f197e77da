// AG-UI connect with the official client (@ag-ui/client's HttpAgent, its connectAgent) against
// live servers: a thread's snapshots, then what waits or the rest of its run, each once.
//
//   ASR_URL=http://127.0.0.1:PORT [ASR_URL_B=http://127.0.0.1:PORT2] ASR_KEY=asr_... npm test
//
// ASR_URL_B is another replica on the same database (tests/e2e/test_ag_ui_node.py starts two):
// the run goes to one, the connect to the other. Without it both are ASR_URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const URL_A = process.env.ASR_URL;
const URL_B = process.env.ASR_URL_B || URL_A;
const KEY = process.env.ASR_KEY;
if (!URL_A || !KEY) throw new Error("set ASR_URL and ASR_KEY (python -m tests.live_server start DIR)");
const headers = { Authorization: `Bearer ${KEY}` };

/** HttpAgent whose connect is the service's connect route (HttpAgent implements run only):
 * connectAgent then applies the stream with the client's own pipeline and verification. */
class ConnectingAgent extends HttpAgent {
  connect(input) {
    return this.run(input);
  }
}

const runner = (threadId, url = URL_A) => new HttpAgent({ url: `${url}/v1/ag-ui`, headers, threadId });
const connector = (threadId, url = URL_B) =>
  new ConnectingAgent({ url: `${url}/v1/ag-ui/connect`, headers, threadId });

async function connect(a) {
  const events = [];
  await a.connectAgent({}, { onEvent: ({ event }) => void events.push(event) });
  return { events, types: events.map((e) => e.type) };
}

const text = (events) =>
  events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");

async function until(check, what) {
  for (let i = 0; i < 500; i++) { // bounded: 10 s
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function activeRun(url, threadId) {
  const reply = await fetch(`${url}/v1/sessions/${threadId}`, { headers });
  return reply.status === 200 ? (await reply.json()).active_run_id : null;
}

test("a connect during a long run on the other replica: snapshots, then the rest once", async () => {
  const threadId = `t-${randomUUID()}`;
  const a = runner(threadId);
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content: "[sleep:3000] [words:30]" });
  const running = a.runAgent({ runId: `r-${randomUUID()}` });
  await until(async () => (await activeRun(URL_B, threadId)) !== null, "the run to start");
  const c = connector(threadId);
  const { events, types } = await connect(c);
  const original = await running;
  assert.deepEqual(types.slice(0, 3), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]);
  assert.equal(types.at(-1), "RUN_FINISHED");
  assert.deepEqual(events.at(-1).outcome, { type: "success" });
  const words = Array.from({ length: 30 }, (_, n) => `word${n + 1}`).join(" ");
  assert.equal(text(events), words);
  assert.equal(original.result, words);
  assert.equal(types.filter((t) => t === "TEXT_MESSAGE_START").length, 1);
  assert.equal(types.filter((t) => t === "RUN_STARTED").length, 1);
  // The connected agent holds the same conversation as the one that ran it.
  assert.deepEqual(
    c.messages.map((m) => [m.role, m.content]),
    a.messages.map((m) => [m.role, m.content]),
  );
  assert.equal(await activeRun(URL_B, threadId), null);
});

test("a connect to a thread waiting on an approval yields the interrupt again", async () => {
  const threadId = `t-${randomUUID()}`;
  const a = runner(threadId);
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content: '[tool:echo {"text": "ship it"}]' });
  const forwardedProps = { approval_required: ["echo"] };
  const events = [];
  await a.runAgent({ runId: `r-${randomUUID()}`, forwardedProps }, { onEvent: ({ event }) => void events.push(event) });
  const [interrupt] = events.at(-1).outcome.interrupts;

  const c = connector(threadId);
  const { events: again, types } = await connect(c);
  assert.deepEqual(types, [
    "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT",
    "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED",
  ]);
  assert.equal(again.at(-1).outcome.type, "interrupt");
  assert.deepEqual(again.at(-1).outcome.interrupts.map((i) => i.id), [interrupt.id]);
  // The reloaded agent answers it; the run continues on the service.
  const resumer = runner(threadId, URL_B);
  resumer.setMessages(c.messages);
  const resumed = await resumer.runAgent({
    runId: `r-${randomUUID()}`,
    forwardedProps,
    resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }],
  });
  assert.match(resumed.result ?? "", /echo returned/);
});

test("a connect to a thread waiting on a frontend tool yields the call again", async () => {
  const threadId = `t-${randomUUID()}`;
  const a = runner(threadId);
  const tools = [{ name: "pick_color", description: "Ask for a color.", parameters: { type: "object" } }];
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content: '[tool:pick_color {"hint": "warm"}]' });
  const events = [];
  await a.runAgent({ runId: `r-${randomUUID()}`, tools }, { onEvent: ({ event }) => void events.push(event) });
  const [callId] = events.at(-1).outcome.pendingToolCallIds;

  const c = connector(threadId);
  const { events: again } = await connect(c);
  const start = again.find((e) => e.type === "TOOL_CALL_START");
  assert.equal(start.toolCallId, callId);
  assert.deepEqual(again.at(-1).outcome, { type: "success", pendingToolCallIds: [callId] });
  const calls = c.messages.flatMap((m) => m.toolCalls ?? []);
  assert.deepEqual(calls.map((t) => t.id), [callId]); // once, not in the snapshot and again
});

test("connect to an unknown thread is a 404 problem", async () => {
  const reply = await fetch(`${URL_B}/v1/ag-ui/connect`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/json" },
    body: JSON.stringify({ threadId: `never-${randomUUID()}` }),
  });
  assert.equal(reply.status, 404);
  assert.match(reply.headers.get("content-type"), /application\/problem\+json/);
});

/** Complete SSE frames ({id, event}) of a response, until `stop(frames)` says enough. */
async function frames(response, stop = () => false) {
  const out = [];
  let buffer = "";
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const id = block.split("\n").find((l) => l.startsWith("id:"))?.slice(3).trim() ?? null;
      const data = block.split("\n").find((l) => l.startsWith("data:"));
      if (data) out.push({ id, event: JSON.parse(data.slice(5)) });
    }
    if (stop(out)) {
      await reader.cancel();
      break;
    }
  }
  return out;
}

test("a connect stream cut mid-text resumes on the other replica with Last-Event-ID, each event once", async () => {
  const threadId = `t-${randomUUID()}`;
  const a = runner(threadId);
  a.addMessage({ id: `u-${randomUUID()}`, role: "user", content: "[sleep:1500] [words:30]" });
  const running = a.runAgent({ runId: `r-${randomUUID()}` });
  await until(async () => (await activeRun(URL_B, threadId)) !== null, "the run to start");
  const request = (url, lastId) =>
    fetch(`${url}/v1/ag-ui/connect`, {
      method: "POST",
      headers: {
        ...headers,
        "Content-Type": "application/json",
        Accept: "text/event-stream",
        ...(lastId ? { "Last-Event-ID": lastId } : {}),
      },
      body: JSON.stringify({ threadId }),
    });
  const contents = (fs) => fs.filter((f) => f.event.type === "TEXT_MESSAGE_CONTENT").length;
  const first = await frames(await request(URL_B), (fs) => contents(fs) >= 1);
  const lastId = first.at(-1).id;
  assert.ok(lastId, "every frame has an id");
  const rest = await frames(await request(URL_A, lastId));
  await running;
  const all = [...first, ...rest].map((f) => f.event);
  const words = Array.from({ length: 30 }, (_, n) => `word${n + 1}`).join(" ");
  assert.equal(text(all), words);
  assert.deepEqual(rest.map((f) => f.event.type).filter((t) => t === "RUN_STARTED" || t.endsWith("SNAPSHOT")), []);
  assert.equal(all.filter((e) => e.type === "TEXT_MESSAGE_START").length, 1);
  assert.equal(all.filter((e) => e.type === "RUN_FINISHED").length, 1);
  assert.equal(all.at(-1).type, "RUN_FINISHED");
});
