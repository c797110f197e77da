/**
 * Server-Sent Events over a fetch response body, for browsers and Node alike (Node 20 has
 * fetch and web streams but no EventSource; fetch can also send headers, which EventSource
 * cannot). The wire format is parsed by `eventsource-parser` (line ends CRLF, LF or CR, cut
 * anywhere between network chunks); this module types what it hands over.
 */

import { createParser, type EventSourceMessage } from "eventsource-parser";

import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** Any ledger event (the OpenAPI `*Event` schemas); narrow its `payload` by checking `type`. */
export type LedgerEvent = Schemas["EventList"]["data"][number];
export type EventType = LedgerEvent["type"];
/** The ledger event of one type, e.g. `EventOf<"RUN_FINISHED">`. */
export type EventOf<T extends EventType> = Extract<LedgerEvent, { type: T }>;

/** A ledger event's frame: `event` is its type, `id` its seq (tenant stream: a cursor). */
export type EventFrame<T extends EventType = EventType> = Extract<
  { [K in EventType]: { event: K; id: string; data: EventOf<K> } }[EventType],
  { event: T }
>;

/** A piece of the model's output as it is written (never stored; no id of its own). */
export type DeltaData = Omit<Schemas["DeltaFrame"], "type"> & {
  type: "delta" | "reasoning_delta";
  text?: string;
  run_id?: string;
  turn_id?: string;
};
export interface DeltaStreamFrame {
  event: "delta" | "reasoning_delta";
  id: null;
  data: DeltaData;
}

/** `overflow` / `shutdown`: the server ends the stream; resume after `resume_after`. */
export type ControlFrame =
  | { event: "overflow"; id: null; data: Schemas["StreamEndFrame"] }
  | { event: "shutdown"; id: null; data: Schemas["StreamEndFrame"] & Partial<Schemas["ShutdownFrame"]> };

/** A failure inside a started stream: `ERROR` without an id, its data a problem document.
 * (A ledger `ERROR` event has an id: check `frame.id !== null` to tell them apart.) */
export interface ProblemFrame {
  event: "ERROR";
  id: null;
  data: Schemas["Problem"];
}

/**
 * One SSE frame, a union discriminated by `event`: a ledger event (`id` set, `data` typed by
 * its type), a delta, a control frame or a problem. Narrow it by `frame.event`:
 *
 *     if (frame.event === "RUN_FINISHED") frame.data.payload.stop_reason;
 *     if (frame.event === "delta") frame.data.text;
 */
export type Frame = EventFrame | DeltaStreamFrame | ControlFrame | ProblemFrame;

/** A frame of a ledger event (its own `id`), of any type or of the ones given. */
export function isEventFrame(frame: Frame): frame is EventFrame;
export function isEventFrame<T extends EventType>(frame: Frame, ...types: T[]): frame is EventFrame<T>;
export function isEventFrame(frame: Frame, ...types: string[]): boolean {
  return frame.id !== null && (types.length === 0 || types.includes(frame.event));
}

/**
 * Frames of a `text/event-stream` body, as they arrive. Unlike EventSource's lastEventId,
 * `id` is only set on a frame that carried an `id:` line itself, so a delta after an event
 * never looks like that event again. Comments (heartbeats) and `retry:` are not frames.
 */
export async function* readFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<Frame> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let parsed: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (message) => parsed.push(message) });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.feed(decoder.decode(value, { stream: true }));
      const ready = parsed;
      parsed = [];
      for (const message of ready) yield toFrame(message);
    }
  } finally {
    reader.releaseLock();
  }
}

function toFrame(message: EventSourceMessage): Frame {
  let data: Record<string, unknown>;
  try {
    const value: unknown = JSON.parse(message.data);
    data = value !== null && typeof value === "object" ? (value as Record<string, unknown>) : { value };
  } catch {
    data = { raw: message.data };
  }
  // The server's frames are what its OpenAPI document says (checked by the drift test); a
  // newer server's new event types arrive as they are, typed as the nearest known frame.
  return { event: message.event || "message", data, id: message.id || null } as unknown as Frame;
}
