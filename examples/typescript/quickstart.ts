// Quick start with the TypeScript client: a session, a run, a streamed run, the typed ledger,
// and the timeline followed over SSE.
//
//   ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... bash examples/typescript/run.sh
import { AsrClient, type LedgerEvent } from "../../clients/typescript/src/index.js";

const asr = new AsrClient({ baseUrl: process.env.ASR_URL!, apiKey: process.env.ASR_KEY! });

const session = await asr.createSession({ metadata: { example: "quickstart" } });
const sid = session.session_id;
const run = await asr.createRun(sid, { input: "hello" });
console.log("run:", run.stop_reason, run.output);

let text = "";
for await (const frame of asr.streamRun(sid, { input: "[words:5]" })) {
  if (frame.event === "delta") text += String(frame.data.text ?? "");
}
console.log("streamed:", text);

// Events are a union told apart by `type`: each branch knows its payload's fields.
const describe = (event: LedgerEvent): string => {
  switch (event.type) {
    case "FINAL_OUTPUT":
      return `final output: ${event.payload.text}`;
    case "RUN_FINISHED":
      return `run finished: ${event.payload.status} ${event.payload.stop_reason ?? ""}`;
    default:
      return event.type;
  }
};
for (const event of (await asr.listEvents(sid, { limit: 1000 })).data) {
  console.log(event.seq, describe(event));
}

const last = (await asr.getSession(sid)).last_seq;
const controller = new AbortController();
for await (const frame of asr.streamEvents(sid, { afterSeq: last - 2, signal: controller.signal })) {
  console.log("timeline:", frame.id, frame.event);
  if (frame.id === String(last)) break;
}
controller.abort();
await asr.deleteSession(sid);
