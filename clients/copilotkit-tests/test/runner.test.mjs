// CopilotKit's runtime (v2, @copilotkit/runtime) with asr-client/copilotkit's AsrAgentRunner
// against live servers. Each "process" is a fresh CopilotRuntime and AsrAgentRunner (nothing
// shared but the service), served by CopilotKit's own fetch handler, so a runtime instance
// created after a run started stands for a restarted Node process.
//
//   ASR_URL=http://127.0.0.1:PORT [ASR_URL_B=http://127.0.0.1:PORT2] ASR_KEY=asr_... npm test
//
// ASR_URL_B is another replica on the same database (tests/e2e/test_ag_ui_node.py starts two);
// without it both are ASR_URL.
process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime, createCopilotRuntimeHandler } from "@copilotkit/runtime/v2";
import { AsrAgentRunner } from "asr-client/copilotkit";

const URL_A = process.env.ASR_URL;
const URL_B = process.env.ASR_URL_B || URL_A;
const KEY = process.env.ASR_KEY;
if (!URL_A || !KEY) throw new Error("set ASR_URL and ASR_KEY (python -m tests.live_server start DIR)");
const BASE = "/api/copilotkit";

/** A CopilotKit runtime "process" talking to one service replica. */
function processOn(url) {
  const runner = new AsrAgentRunner({ url, apiKey: KEY });
  const runtime = new CopilotRuntime({
    agents: { default: new HttpAgent({ url: `${url}/v1/ag-ui`, headers: { Authorization: `Bearer ${KEY}` } }) },
    runner,
  });
  const handler = createCopilotRuntimeHandler({ runtime, basePath: BASE });
  const post = (path, body) =>
    handler(
      new Request(`http://copilotkit.local${BASE}${path}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body),
      }),
    );
  return { runner, post };
}

async function events(response) {
  assert.equal(response.status, 200, await response.clone().text());
  const text = await response.text();
  return text
    .split(/\r?\n/)
    .filter((line) => line.startsWith("data:"))
    .map((line) => JSON.parse(line.slice(5)));
}

const input = (threadId, content, runId = `r-${randomUUID()}`) => ({
  threadId,
  runId,
  messages: [{ id: `u-${randomUUID()}`, role: "user", content }],
  tools: [],
  context: [],
  state: {},
  forwardedProps: {},
});

const text = (evs) => evs.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
const words = (n) => Array.from({ length: n }, (_, i) => `word${i + 1}`).join(" ");

async function until(check, what) {
  for (let i = 0; i < 500; i++) { // bounded: 10 s
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test("run, then connect from a restarted runtime on the other replica", async () => {
  const threadId = `ck-${randomUUID()}`;
  const first = processOn(URL_A);
  const ran = await events(await first.post("/agent/default/run", input(threadId, "[words:5]")));
  assert.equal(ran[0].type, "RUN_STARTED");
  assert.equal(ran.at(-1).type, "RUN_FINISHED");
  assert.equal(text(ran), words(5));

  const restarted = processOn(URL_B);
  assert.equal(await restarted.runner.isRunning({ threadId }), false);
  const again = await events(await restarted.post("/agent/default/connect", { ...input(threadId, "x"), messages: [] }));
  const snapshot = again.find((e) => e.type === "MESSAGES_SNAPSHOT");
  assert.deepEqual(snapshot.messages.map((m) => [m.role, m.content]), [["user", "[words:5]"], ["assistant", words(5)]]);
  assert.equal(again.at(-1).type, "RUN_FINISHED");
});

test("connect from a restarted runtime during a run yields the rest once; isRunning tracks it", async () => {
  const threadId = `ck-${randomUUID()}`;
  const first = processOn(URL_A);
  const running = first.post("/agent/default/run", input(threadId, "[sleep:2500] [words:20]")).then(events);
  const restarted = processOn(URL_B);
  await until(() => restarted.runner.isRunning({ threadId }), "isRunning on the other replica");
  const joined = await events(await restarted.post("/agent/default/connect", { ...input(threadId, "x"), messages: [] }));
  const original = await running;
  const types = joined.map((e) => e.type);
  assert.deepEqual(types.slice(0, 3), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]);
  assert.equal(types.at(-1), "RUN_FINISHED");
  assert.equal(text(joined), words(20));
  assert.equal(text(original), words(20));
  assert.equal(types.filter((t) => t === "TEXT_MESSAGE_START").length, 1);
  assert.equal(await restarted.runner.isRunning({ threadId }), false);
  assert.equal(await first.runner.isRunning({ threadId }), false);

  // After the run: a third instance connects and sees the whole conversation.
  const later = processOn(URL_A);
  const after = await events(await later.post("/agent/default/connect", { ...input(threadId, "x"), messages: [] }));
  const snapshot = after.find((e) => e.type === "MESSAGES_SNAPSHOT");
  assert.equal(snapshot.messages.at(-1).content, words(20));
});

test("stop from a restarted runtime on the other replica ends the run", async () => {
  const threadId = `ck-${randomUUID()}`;
  const runId = `r-${randomUUID()}`;
  const first = processOn(URL_A);
  const running = first.post("/agent/default/run", input(threadId, "[sleep:30000]", runId)).then(events);
  const restarted = processOn(URL_B);
  await until(() => restarted.runner.isRunning({ threadId }), "the run to start");
  assert.equal(await restarted.runner.stop({ threadId, runId: "not-this-one" }), false);
  const reply = await (
    await processOn(URL_B).post(`/agent/default/stop/${encodeURIComponent(threadId)}`, { runId })
  ).json();
  assert.equal(reply.stopped, true, JSON.stringify(reply));
  const ended = await running;
  assert.equal(ended.at(-1).type, "RUN_FINISHED");
  assert.deepEqual(ended.at(-1).outcome, { type: "cancelled" });
  assert.equal(await restarted.runner.isRunning({ threadId }), false);
  assert.equal(await restarted.runner.stop({ threadId }), false);
});

test("connect to a thread the service never saw is empty; isRunning and stop say no", async () => {
  const threadId = `ck-${randomUUID()}`;
  const p = processOn(URL_B);
  assert.equal(await p.runner.isRunning({ threadId }), false);
  assert.equal(await p.runner.stop({ threadId }), false);
  const none = await events(await p.post("/agent/default/connect", { ...input(threadId, "x"), messages: [] }));
  assert.deepEqual(none, []);
});
