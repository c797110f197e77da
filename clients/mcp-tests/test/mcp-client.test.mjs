// The official TypeScript MCP SDK's client against /mcp: ASR_URL (and ASR_URL_B, a second
// replica sharing the database, when given) with the tenant key ASR_KEY.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const A = process.env.ASR_URL;
const B = process.env.ASR_URL_B ?? A;
const KEY = process.env.ASR_KEY;
const auth = { Authorization: `Bearer ${KEY}` };

async function connect(base, headers = auth) {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers },
  });
  const client = new Client({ name: "asr-mcp-tests", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

async function runsOf(base, sessionId) {
  const reply = await fetch(`${base}/v1/sessions/${sessionId}/runs`, { headers: auth });
  assert.equal(reply.status, 200);
  return (await reply.json()).data;
}

test("lists, calls, continues on the other replica, reports progress", async () => {
  const { client, transport } = await connect(A);
  const { tools } = await client.listTools();
  assert.ok(tools.length >= 1 && tools[0].outputSchema);
  const first = await client.callTool({ name: tools[0].name, arguments: { input: "hello" } });
  assert.equal(first.isError, false);
  const { session_id: sessionId } = first.structuredContent;
  await transport.terminateSession();
  await client.close();

  const other = await connect(B);
  const steps = [];
  const second = await other.client.callTool(
    { name: tools[0].name, arguments: { input: "[sleep:2500] [words:3]", session_id: sessionId } },
    undefined,
    { onprogress: (p) => steps.push(p) },
  );
  assert.equal(second.content[0].text, "word1 word2 word3");
  assert.equal(second.structuredContent.session_id, sessionId);
  assert.ok(steps.length >= 3, JSON.stringify(steps));
  assert.equal((await runsOf(A, sessionId)).length, 2);
  await other.client.close();
});

test("an aborted call interrupts its run; unknown tools and bad keys are errors", async () => {
  const { client } = await connect(A);
  const first = await client.callTool({ name: "agent", arguments: { input: "hi" } });
  const { session_id: sessionId } = first.structuredContent;
  const abort = new AbortController();
  setTimeout(() => abort.abort(), 1000);
  await assert.rejects(
    client.callTool(
      { name: "agent", arguments: { input: "[sleep:8000] long", session_id: sessionId } },
      undefined,
      { signal: abort.signal },
    ),
  );
  let runs = [];
  for (let i = 0; i < 50; i++) {
    runs = await runsOf(B, sessionId);
    if (runs[0].status !== "running" && runs[0].status !== "queued") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(runs[0].status, "interrupted");
  assert.equal(runs[0].stop_reason, "INTERRUPTED");

  await assert.rejects(client.callTool({ name: "no_such_agent", arguments: { input: "x" } }), /-32602/);
  await client.close();

  await assert.rejects(connect(B, { Authorization: "Bearer asr_wrong" }));
});
