// CopilotKit's runtime (v2) with durable threads, no browser: AsrAgentRunner keeps every
// thread in the Agent Session Runtime, so a runtime created later (a restarted Node process)
// connects to a thread, asks whether it runs, and stops it.
//
//   cd clients/typescript && npm ci && npm run build
//   cd ../copilotkit-tests && npm ci
//   ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... node --preserve-symlinks examples/runner.mjs
// (--preserve-symlinks: asr-client is linked from ../typescript here; an app that installs
// it from npm needs no flag.)
process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";

import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime, createCopilotRuntimeHandler } from "@copilotkit/runtime/v2";
import { AsrAgentRunner } from "asr-client/copilotkit";

const url = process.env.ASR_URL ?? "http://127.0.0.1:8000";
const apiKey = process.env.ASR_KEY;

function startProcess() {
  const runtime = new CopilotRuntime({
    agents: { default: new HttpAgent({ url: `${url}/v1/ag-ui` }) },
    runner: new AsrAgentRunner({ url, apiKey }),
  });
  return { runtime, handle: createCopilotRuntimeHandler({ runtime, basePath: "/api/copilotkit" }) };
}

async function post(handle, path, body) {
  const reply = await handle(
    new Request(`http://localhost/api/copilotkit${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
  const text = await reply.text();
  return text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)));
}

const threadId = `example-${randomUUID()}`;
const input = (content) => ({
  threadId, runId: randomUUID(), tools: [], context: [], state: {}, forwardedProps: {},
  messages: content ? [{ id: randomUUID(), role: "user", content }] : [],
});

const first = startProcess();
const running = post(first.handle, "/agent/default/run", input("[sleep:1500] [words:8]"));
await new Promise((resolve) => setTimeout(resolve, 500));

const restarted = startProcess(); // nothing in memory: the thread lives in the service
console.log("isRunning:", await restarted.runtime.runner.isRunning({ threadId }));
const joined = await post(restarted.handle, "/agent/default/connect", input(null));
console.log("connect:", joined.map((e) => e.type).join(" "));
await running;
console.log("isRunning after:", await restarted.runtime.runner.isRunning({ threadId }));

const long = post(first.handle, "/agent/default/run", input("[sleep:30000]"));
await new Promise((resolve) => setTimeout(resolve, 500));
console.log("stop:", await startProcess().runtime.runner.stop({ threadId }));
console.log("the run ended:", (await long).at(-1));
