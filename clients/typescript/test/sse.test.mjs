// The SSE parser against a recorded run stream (test/fixtures/run-stream.sse: `POST .../runs`
// in stream mode, with deltas, a heartbeat comment and non-ASCII text), cut into two network
// chunks at every byte position, with the server's CRLF line ends and with LF: every cut must
// give the frames the whole stream gives. No server needed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { readFrames } from "../dist/sse.js";

const crlf = readFileSync(new URL("./fixtures/run-stream.sse", import.meta.url));
const lf = Buffer.from(crlf.toString("latin1").replaceAll("\r\n", "\n"), "latin1");

function body(chunks) {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(new Uint8Array(chunk));
      controller.close();
    },
  });
}

async function frames(chunks) {
  const seen = [];
  for await (const frame of readFrames(body(chunks))) seen.push(frame);
  return seen;
}

test("the recorded stream, in one chunk", async () => {
  const whole = await frames([crlf]);
  assert.deepEqual(
    whole.map((f) => [f.event, f.id]),
    [
      ["RUN_STARTED", "2"], ["USER_INPUT", "3"], ["STEP_START", "4"], ["MODEL_REQUEST", "5"],
      ["delta", null], ["delta", null], ["MODEL_RESPONSE", "6"], ["MEMORY_ITEMS_APPENDED", "7"],
      ["STEP_END", "8"], ["FINAL_OUTPUT", "9"], ["AUTO_STOP", "10"], ["RUN_FINISHED", "11"],
    ],
  );
  assert.equal(whole.filter((f) => f.event === "delta").map((f) => f.data.text).join(""), "word1 word2 word3");
  assert.match(JSON.stringify(whole[1].data), /héllo ✓/);
  assert.deepEqual(await frames([lf]), whole);
});

for (const [name, bytes] of [["CRLF", crlf], ["LF", lf]]) {
  test(`${name} line ends: two chunks cut at every byte position give the same frames`, async () => {
    const want = await frames([crlf]);
    for (let cut = 1; cut < bytes.length; cut++) {
      const got = await frames([bytes.subarray(0, cut), bytes.subarray(cut)]);
      assert.deepEqual(got, want, `cut at byte ${cut} of ${bytes.length}`);
    }
  });
}

test("one byte per chunk gives the same frames", async () => {
  const want = await frames([crlf]);
  for (const bytes of [crlf, lf]) {
    const chunks = Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
    assert.deepEqual(await frames(chunks), want);
  }
});
