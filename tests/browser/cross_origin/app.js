// A frontend on another origin, written against the TypeScript client's browser build:
// create a session, run it in stream mode (fetch streaming), follow the timeline with
// EventSource and a stream token. The API's address and key come in the URL's fragment
// (test only: a real page never puts a key in a URL).
import { AsrClient } from "/asr-client.js";

const params = new URLSearchParams(location.hash.slice(1));
const asr = new AsrClient({ baseUrl: params.get("api"), apiKey: params.get("key") });
const result = { deltas: [], runFrames: [], timeline: [], states: [], error: null };
window.__result = result;

async function main() {
  const session = await asr.createSession({ metadata: { from: location.origin } });
  result.sessionId = session.session_id;
  const seenRunFinished = new Promise((resolve) => {
    asr.openEventSource(session.session_id, {
      afterSeq: 0,
      onState: (state) => result.states.push(state),
      onEvent: (event) => {
        result.timeline.push([event.seq, event.type]);
        document.getElementById("timeline").textContent += `${event.seq} ${event.type}\n`;
        if (event.type === "RUN_FINISHED") resolve();
      },
    }).then((handle) => { result.handle = handle; });
  });
  for await (const frame of asr.streamRun(session.session_id, { input: "[words:5]" })) {
    if (frame.event === "delta") {
      result.deltas.push(String(frame.data.text));
      document.getElementById("output").textContent += String(frame.data.text);
    } else {
      result.runFrames.push([Number(frame.id), frame.event]);
    }
  }
  await seenRunFinished;
  result.handle.close();
  document.getElementById("status").textContent = "done";
}

main().catch((error) => {
  result.error = String(error && error.stack || error);
  document.getElementById("status").textContent = "failed";
});
