// The official A2A TypeScript client (@a2a-js/sdk) against a live server.
//
//   ASR_URL=http://127.0.0.1:PORT ASR_KEY=asr_... npm test
//
// It resolves the card from the base URL (the JSON-RPC transport the card names), sends a
// message and streams another, reads and cancels tasks, re-subscribes to a running task,
// answers an approval, and meets A2A's own errors; the HTTP+JSON binding the card names
// second answers a message, a stream and an unknown task the same way.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";

const URL_ = process.env.ASR_URL;
const KEY = process.env.ASR_KEY;
if (!URL_ || !KEY) throw new Error("set ASR_URL and ASR_KEY (python -m tests.live_server start DIR)");

// TaskState and Role as the protocol numbers them.
const SUBMITTED = 1, WORKING = 2, COMPLETED = 3, CANCELED = 5, INPUT_REQUIRED = 6;
const USER = 1;

const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set("Authorization", `Bearer ${KEY}`);
  return fetch(url, { ...init, headers });
};

async function client(transport = new JsonRpcTransportFactory({ fetchImpl })) {
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [transport],
    preferredTransports: [transport.protocolName],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  });
  return new ClientFactory(options).createFromUrl(URL_);
}

function message(content, ids = {}) {
  const part =
    typeof content === "string"
      ? { content: { $case: "text", value: content } }
      : { content: { $case: "data", value: content } };
  return { message: { messageId: randomUUID(), role: USER, parts: [part], ...ids } };
}

const taskOf = (result) => (result.payload ? result.payload.value : result);
const answer = (task) =>
  task.artifacts.flatMap((a) => a.parts.map((p) => p.content?.value ?? "")).join("");

test("the card is public and names the JSON-RPC endpoint", async () => {
  const card = await (await fetch(`${URL_}/.well-known/agent-card.json`)).json();
  assert.equal(card.supportedInterfaces[0].url, `${URL_}/a2a`);
  assert.equal(card.capabilities.streaming, true);
  assert.equal(card.capabilities.pushNotifications, true);
});

test("a message gets a completed task with the answer; another streams", async () => {
  const a2a = await client();
  const task = taskOf(await a2a.sendMessage(message("hello")));
  assert.equal(task.status.state, COMPLETED);
  assert.equal(answer(task), "echo: hello");
  const got = await a2a.getTask({ id: task.id, historyLength: 1 });
  assert.equal(got.history.length, 1);

  const events = [];
  for await (const event of a2a.sendMessageStream(message("[words:3]"))) events.push(event);
  assert.equal(events[0].payload.$case, "task");
  assert.equal(events[0].payload.value.status.state, SUBMITTED);
  const last = events.at(-1).payload;
  assert.equal(last.$case, "statusUpdate");
  assert.equal(last.value.status.state, COMPLETED);
  assert.ok(events.some((e) => e.payload.$case === "artifactUpdate"));
});

test("the HTTP+JSON binding the card names answers the same", async () => {
  const a2a = await client(new RestTransportFactory({ fetchImpl }));
  const task = taskOf(await a2a.sendMessage(message("hello")));
  assert.equal(task.status.state, COMPLETED);
  assert.equal(answer(task), "echo: hello");
  const got = await a2a.getTask({ id: task.id, historyLength: 1 });
  assert.equal(got.history.length, 1);
  const events = [];
  for await (const event of a2a.sendMessageStream(message("[words:3]"))) events.push(event);
  assert.equal(events.at(-1).payload.value.status.state, COMPLETED);
  await assert.rejects(a2a.getTask({ id: "run_none" }), (e) => /not ?found/i.test(`${e.name} ${e.message}`));
});

test("a long task is cancelled; a running one is re-subscribed", async () => {
  const a2a = await client();
  const started = a2a.sendMessageStream(message("[continue:2] [sleep:400] go"));
  const first = await started.next();
  await started.return();
  const taskId = first.value.payload.value.id;
  const rest = [];
  for await (const event of a2a.resubscribeTask({ id: taskId })) rest.push(event);
  assert.equal(rest[0].payload.$case, "task");
  assert.equal(rest.at(-1).payload.value.status.state, COMPLETED);

  const long = taskOf(
    await a2a.sendMessage({ ...message("[sleep:5000] long"), configuration: { returnImmediately: true } }),
  );
  assert.ok([SUBMITTED, WORKING].includes(long.status.state));
  const cancelled = await a2a.cancelTask({ id: long.id });
  assert.equal(cancelled.status.state, CANCELED);
});

test("an approval is INPUT_REQUIRED until the next message approves it", async () => {
  const created = await fetchImpl(`${URL_}/v1/sessions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ agent: { tools: ["echo"], approval_required: ["echo"] } }),
  });
  const { session_id: contextId } = await created.json();
  const a2a = await client();
  const task = taskOf(await a2a.sendMessage(message('[tool:echo {"text": "x"}]', { contextId })));
  assert.equal(task.status.state, INPUT_REQUIRED);
  const done = taskOf(await a2a.sendMessage(message({ approve: true }, { contextId, taskId: task.id })));
  assert.equal(done.status.state, COMPLETED);
  assert.equal(answer(done), "echo returned: x");
});

test("an unknown task is A2A's TaskNotFound", async () => {
  const a2a = await client();
  await assert.rejects(a2a.getTask({ id: "run_none" }), (e) => /not ?found/i.test(`${e.name} ${e.message}`));
});
