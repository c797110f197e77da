// Re-attach to a thread with the official AG-UI client, no browser: a run starts, a second
// client (a reloaded page) connects while it goes on and gets the thread's messages, its
// state, and the rest of the run live; then a third starts a long run and stops it.
//
//   cd clients/ag-ui-tests && npm ci
//   ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... node examples/connect.mjs
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const url = process.env.ASR_URL ?? "http://127.0.0.1:8000";
const headers = { Authorization: `Bearer ${process.env.ASR_KEY}` };

// HttpAgent runs; its connect() is left to subclasses: point one at the connect route.
class ConnectingAgent extends HttpAgent {
  connect(input) {
    return this.run(input);
  }
}

const threadId = `example-${randomUUID()}`;
const page = new HttpAgent({ url: `${url}/v1/ag-ui`, headers, threadId });
page.addMessage({ id: randomUUID(), role: "user", content: "[sleep:1500] [words:12]" });
const running = page.runAgent({ runId: randomUUID() });

await new Promise((resolve) => setTimeout(resolve, 500)); // the "reload", mid-run
const reloaded = new ConnectingAgent({ url: `${url}/v1/ag-ui/connect`, headers, threadId });
await reloaded.connectAgent({}, {
  onEvent: ({ event }) => console.log("connect:", event.type, event.delta ?? ""),
});
await running;
console.log("reloaded page's messages:", reloaded.messages.map((m) => `${m.role}: ${m.content}`));

// Stop a thread's active run from anywhere (any replica, any process).
const long = new HttpAgent({ url: `${url}/v1/ag-ui`, headers, threadId: `example-${randomUUID()}` });
long.addMessage({ id: randomUUID(), role: "user", content: "[sleep:30000]" });
const endless = long.runAgent({ runId: randomUUID() });
await new Promise((resolve) => setTimeout(resolve, 500));
const stop = await fetch(`${url}/v1/ag-ui/stop`, {
  method: "POST",
  headers: { ...headers, "Content-Type": "application/json" },
  body: JSON.stringify({ threadId: long.threadId }),
});
console.log("stop:", await stop.json());
await endless;
