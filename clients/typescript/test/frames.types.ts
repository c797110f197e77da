// Compiled (never run) by `npm run typecheck` under --strict: the stream frames are the
// OpenAPI event union, so narrowing a frame gives its payload type. A `@ts-expect-error`
// line must fail to compile, or the check fails.
import { AsrClient, type DeltaData, type Frame, isEventFrame, type LedgerEvent } from "../src/index.js";

export async function finished(asr: AsrClient, sessionId: string): Promise<number | null | undefined> {
  let text = "";
  for await (const frame of asr.streamRun(sessionId, { input: "hi" })) {
    // @ts-expect-error -- not every frame has a payload (deltas and control frames do not)
    void frame.data.payload;
    if (frame.event === "delta") {
      const delta: DeltaData = frame.data;
      text += delta.text ?? "";
      const id: null = frame.id;
      void id;
    }
    if (frame.event === "RUN_FINISHED") {
      const seq: string = frame.id;
      void seq;
      return frame.data.payload.turns; // RUN_FINISHED's payload alone has `turns`
    }
  }
  return undefined;
}

export function byType(frame: Frame): string | number | null {
  if (!isEventFrame(frame)) return null;
  const event: LedgerEvent = frame.data;
  // @ts-expect-error -- `forked_from_seq` is SESSION_FORKED's alone (others: unknown extras)
  const notYet: number = event.payload.forked_from_seq;
  void notYet;
  if (event.type === "SESSION_FORKED") return event.payload.forked_from_seq;
  if (event.type === "TOOL_CALL") return event.payload.name;
  if (frame.event === "ERROR") return frame.data.payload.code; // the ledger ERROR event
  return event.seq;
}

export function problemOrEvent(frame: Frame): string {
  if (frame.event !== "ERROR") return "";
  // The ERROR frame without an id is a problem document; with one, the ledger ERROR event.
  return frame.id === null ? frame.data.code : frame.data.payload.detail;
}

export function only(frame: Frame): number | undefined {
  if (isEventFrame(frame, "RUN_STARTED", "RUN_FINISHED")) {
    if (frame.event === "RUN_STARTED") return frame.data.payload.client_tools.length;
    return frame.data.payload.turns ?? undefined;
  }
  if (frame.event === "shutdown") return frame.data.last_seq;
  return undefined;
}
