/**
 * A Server-Sent Events parser over a fetch response body, for browsers and Node alike
 * (Node 20 has fetch and web streams but no EventSource; fetch can also send headers,
 * which EventSource cannot).
 */

/** One SSE frame: a ledger event (`id` set) or a frame without an id of its own. */
export interface Frame {
  /** The event name: an event type, `delta`, `overflow`, `shutdown` or `ERROR`. */
  event: string;
  /** The frame's JSON data (an event, a delta, a control body or a problem). */
  data: Record<string, unknown>;
  /** The frame's own id (a seq, or a tenant cursor); null for deltas and control frames. */
  id: string | null;
}

/**
 * Frames of an `text/event-stream` body, as they arrive. Unlike EventSource's lastEventId,
 * `id` is only set on a frame that carried an `id:` line itself, so a delta after an event
 * never looks like that event again.
 */
export async function* readFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<Frame> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let id: string | null = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) yield toFrame(event || "message", data.join("\n"), id);
          event = "";
          data = [];
          id = null;
          continue;
        }
        if (line.startsWith(":")) continue; // a comment: the heartbeat
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value_ = colon < 0 ? "" : line.slice(colon + 1);
        if (value_.startsWith(" ")) value_ = value_.slice(1);
        if (field === "event") event = value_;
        else if (field === "data") data.push(value_);
        else if (field === "id") id = value_ || null;
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function toFrame(event: string, raw: string, id: string | null): Frame {
  let data: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(raw);
    data = parsed !== null && typeof parsed === "object" ? (parsed as Record<string, unknown>) : { value: parsed };
  } catch {
    data = { raw };
  }
  return { event, data, id };
}
