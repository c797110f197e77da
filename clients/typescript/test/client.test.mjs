// The TypeScript client against a live server: ASR_URL and ASR_KEY name it (CI starts one).
// Node's own test runner; nothing here judges wall-clock time.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import net from "node:net";
import { after, before, describe, test } from "node:test";

import { ApiError, AsrClient, ConnectionError } from "../dist/index.js";

const URL_ = process.env.ASR_URL;
const KEY = process.env.ASR_KEY;
if (!URL_ || !KEY) throw new Error("set ASR_URL and ASR_KEY to a running server and its key");

const asr = new AsrClient({ baseUrl: URL_, apiKey: KEY });
const user = (content) => ({ type: "message", role: "user", content });

async function take(frames, until) {
  const seen = [];
  for await (const frame of frames) {
    seen.push(frame);
    if (until(frame, seen)) break;
  }
  return seen;
}

describe("routes", () => {
  test("sessions: create (idempotent), list, get, update, append, events, state, save, fork", async () => {
    const key = `ts-${Date.now()}-${Math.random()}`;
    const created = await asr.createSession({ metadata: { user: "ts" }, binding: { workspace: "w" } }, { idempotencyKey: key });
    const again = await asr.createSession({ metadata: { user: "ts" }, binding: { workspace: "w" } }, { idempotencyKey: key });
    assert.equal(again.session_id, created.session_id);
    assert.match(created.created_at, /Z$/);
    const sid = created.session_id;
    const listed = await asr.listSessions({ metadata: { user: "ts" }, limit: 100 });
    assert.ok(listed.data.some((row) => row.session_id === sid));
    const updated = await asr.updateSession(sid, { metadata: { team: "a" } });
    assert.deepEqual(updated.metadata, { user: "ts", team: "a" });
    const appended = await asr.appendItems(sid, { items: [user("hi")] });
    assert.equal(appended.events[0].type, "MEMORY_ITEMS_APPENDED");
    const page = await asr.listEvents(sid, { types: ["SESSION_CREATED"] });
    const first = page.data[0];
    assert.equal(first.type, "SESSION_CREATED");
    if (first.type === "SESSION_CREATED") assert.deepEqual(first.payload.binding, { workspace: "w" });
    const state = await asr.getState(sid);
    await assert.rejects(asr.saveSession(sid, { ifMatch: state.version - 1 }), (error) => {
      assert.ok(error instanceof ApiError);
      assert.equal(error.status, 412);
      return true;
    });
    const saved = await asr.saveSession(sid, { ifMatch: state.version });
    assert.equal(saved.version, state.version + 1);
    const child = await asr.forkSession(sid, { at_seq: 1 });
    assert.equal(child.parent_session_id, sid);
    assert.equal((await asr.getProjection(sid)).equals_live, true);
    await asr.deleteSession(child.session_id);
    await assert.rejects(asr.getSession(child.session_id), (error) => error.code === "session_not_found");
  });

  test("shared state: get, put, JSON Patch, a patch that does not apply, a fork carries it", async () => {
    const { session_id: sid } = await asr.createSession();
    assert.deepEqual(await asr.getSharedState(sid), {});
    assert.deepEqual(await asr.putSharedState(sid, { todos: ["plan"] }), { todos: ["plan"] });
    const patched = await asr.patchSharedState(sid, [{ op: "add", path: "/todos/-", value: "ship" }]);
    assert.deepEqual(patched, { todos: ["plan", "ship"] });
    await assert.rejects(asr.patchSharedState(sid, [{ op: "remove", path: "/nope" }]), (error) => {
      assert.ok(error instanceof ApiError);
      return error.status === 422 && error.code === "invalid_patch";
    });
    const child = await asr.forkSession(sid);
    assert.deepEqual(await asr.getSharedState(child.session_id), { todos: ["plan", "ship"] });
  });

  test("runs: wait, background, client tools, catalogue", async () => {
    const { session_id: sid } = await asr.createSession();
    const run = await asr.createRun(sid, { input: "hello" });
    assert.equal(run.output, "echo: hello");
    assert.deepEqual(Object.keys(run.usage).sort(), ["input_tokens", "output_tokens", "total_tokens"]);
    const asked = await asr.createRun(sid, { input: '[tool:lookup {"q": "x"}]', client_tools: [{ name: "lookup" }] });
    assert.equal(asked.stop_reason, "NEEDS_USER_INPUT");
    const answered = await asr.submitToolOutputs(sid, { outputs: [{ call_id: asked.pending[0].call_id, output: "found" }] });
    assert.equal("stop_reason" in answered && answered.stop_reason, "COMPLETED");
    const types = await asr.listEventTypes();
    assert.ok(types.data.some((entry) => entry.type === "RUN_FINISHED"));
    assert.ok((await asr.listTools()).data.some((tool) => tool.name === "echo"));
    const token = await asr.createStreamToken({ session_id: sid, ttl_seconds: 60 });
    assert.equal(token.session_id, sid);
  });
});

describe("streams", () => {
  test("streamRun yields the run's events and deltas until RUN_FINISHED", async () => {
    const { session_id: sid } = await asr.createSession();
    const frames = await take(asr.streamRun(sid, { input: "[words:3]" }), () => false);
    // Deltas are coalesced (a few frames per interval): 1 to 3 frames, the words in order.
    const deltas = frames.filter((f) => f.event === "delta");
    assert.ok(deltas.length >= 1 && deltas.length <= 3, `${deltas.length} delta frames`);
    assert.equal(deltas.map((f) => f.data.text).join(""), "word1 word2 word3");
    assert.ok(deltas.every((f) => f.id === null));
    assert.equal(frames.at(-1).event, "RUN_FINISHED");
  });

  test("streamEvents replays then follows live", async () => {
    const { session_id: sid } = await asr.createSession();
    await asr.appendItems(sid, { items: [user("a")] });
    const controller = new AbortController();
    const frames = asr.streamEvents(sid, { afterSeq: 0, signal: controller.signal });
    const seen = [];
    for await (const frame of frames) {
      seen.push(Number(frame.id));
      if (seen.length === 2) await asr.appendItems(sid, { items: [user("b")] });
      if (seen.length === 3) break;
    }
    controller.abort();
    assert.deepEqual(seen, [1, 2, 3]);
  });

  describe("through a proxy that cuts connections", () => {
    let proxy;
    let sockets = new Set();
    let heads = [];
    before(async () => {
      const upstream = new URL(URL_);
      proxy = net.createServer((client) => {
        const server = net.connect(Number(upstream.port), upstream.hostname);
        sockets.add(client);
        sockets.add(server);
        client.once("data", (head) => heads.push(head.toString("latin1")));
        client.pipe(server).pipe(client);
        const drop = () => { client.destroy(); server.destroy(); };
        client.on("error", drop);
        server.on("error", drop);
        client.on("close", drop);
        server.on("close", drop);
      });
      await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    });
    after(() => proxy.close());
    const cut = () => { for (const socket of sockets) socket.resetAndDestroy(); sockets = new Set(); };

    test("streamEvents resumes with Last-Event-ID after a cut, no gap, no duplicate", async () => {
      const direct = asr;
      const via = new AsrClient({ baseUrl: `http://127.0.0.1:${proxy.address().port}`, apiKey: KEY });
      const { session_id: sid } = await direct.createSession();
      heads = [];
      const controller = new AbortController();
      const seen = [];
      for await (const frame of via.streamEvents(sid, { afterSeq: 0, signal: controller.signal })) {
        seen.push(Number(frame.id));
        if (seen.length === 1) {
          cut();
          await direct.appendItems(sid, { items: [user("x")] });
          await direct.appendItems(sid, { items: [user("y")] });
        }
        if (seen.length === 3) break;
      }
      controller.abort();
      assert.deepEqual(seen, [1, 2, 3]);
      const resumed = heads.find((head) => /last-event-id: 1\r\n/i.test(head));
      assert.ok(resumed, heads.join("\n---\n"));
    });
  });
});

describe("retries", () => {
  let server;
  let answers = [];
  const seen = [];
  before(async () => {
    server = createServer((request, response) => {
      seen.push({ method: request.method, key: request.headers["idempotency-key"] });
      request.resume();
      const [status, headers, body] = answers.shift() ?? [500, {}, {}];
      response.writeHead(status, { "Content-Type": "application/json", ...headers });
      response.end(JSON.stringify(body));
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  });
  after(() => server.close());

  test("429 and 503 are retried after Retry-After, with the same Idempotency-Key", async () => {
    const waits = [];
    const client = new AsrClient({
      baseUrl: `http://127.0.0.1:${server.address().port}`,
      apiKey: "k",
      retry: { sleep: async (seconds) => { waits.push(seconds); } },
    });
    answers = [
      [429, { "Retry-After": "3" }, { status: 429, code: "too_many_runs" }],
      [503, { "Retry-After": "1" }, { status: 503, code: "database_unavailable" }],
      [200, {}, { session_id: "s", snapshot_seq: 2, version: 3 }],
    ];
    seen.length = 0;
    const saved = await client.saveSession("s");
    assert.equal(saved.version, 3);
    assert.deepEqual(waits, [3, 1]);
    assert.equal(new Set(seen.map((s) => s.key)).size, 1);
    assert.equal(seen.length, 3);
  });

  test("a refused connection is retried, then reported", async () => {
    const waits = [];
    const closed = net.createServer();
    await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    const client = new AsrClient({
      baseUrl: `http://127.0.0.1:${port}`, apiKey: "k",
      retry: { maxAttempts: 3, sleep: async (seconds) => { waits.push(seconds); } },
    });
    await assert.rejects(client.getSession("s"), ConnectionError);
    assert.equal(waits.length, 2);
  });
});
