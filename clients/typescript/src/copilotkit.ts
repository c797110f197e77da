/**
 * `asr-client/copilotkit`: CopilotKit runtime v2's `AgentRunner` backed by the Agent Session
 * Runtime, so that a `CopilotRuntime`'s threads live in the service's ledger rather than in
 * the Node process:
 *
 *     import { CopilotRuntime } from "@copilotkit/runtime/v2";
 *     import { AsrAgentRunner } from "asr-client/copilotkit";
 *     const runtime = new CopilotRuntime({
 *       agents: { default: new HttpAgent({ url: `${ASR}/v1/ag-ui` }) },
 *       runner: new AsrAgentRunner({ url: ASR, apiKey: KEY }),
 *     });
 *
 * - `run` starts the run on the service (`POST /v1/ag-ui[/{agentName}]` with the input's
 *   `runId`, which the service keeps as the run start's idempotency key) and yields its
 *   AG-UI events; the service runs the agent, so the request's `agent` is not called.
 * - `connect` re-attaches to the thread (`POST /v1/ag-ui/connect`): its messages and state,
 *   what waits for the frontend, and the thread's active run live, wherever it was started.
 *   A stream cut before the run ends is resumed with `Last-Event-ID`.
 * - `isRunning` and `stop` ask the service (`GET /v1/sessions/{id}`, `POST /v1/ag-ui/stop`),
 *   so they answer for runs any runtime instance or service replica started.
 *
 * Nothing is kept in this process: a restarted runtime sees the same threads.
 * `@copilotkit/runtime` (and its `rxjs`) are peer dependencies of this entry only.
 */

import {
  AgentRunner,
  type AgentRunnerConnectRequest,
  type AgentRunnerIsRunningRequest,
  type AgentRunnerRunRequest,
  type AgentRunnerStopRequest,
} from "@copilotkit/runtime/v2";
import { createParser } from "eventsource-parser";
import { Observable, type Subscriber } from "rxjs";

/** An AG-UI event as the runner's observables carry it. */
export type AgUiEvent = ReturnType<AgentRunner["run"]> extends Observable<infer E> ? E : never;

export interface AsrAgentRunnerOptions {
  /** The service's base URL, e.g. `http://127.0.0.1:8000`. */
  url: string;
  /** A tenant API key (`asr_…`), sent as a bearer token. */
  apiKey: string;
  /** The agent blueprint new threads run (`POST /v1/ag-ui/{agentName}`); the service's
   * default agent when absent. */
  agentName?: string;
  /** How many times a cut connect stream is resumed (`Last-Event-ID`); 3 by default. */
  resumeAttempts?: number;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);

/** The service's session of an AG-UI thread: the thread id itself when it is a valid
 * session id, else `agui-` and a digest of it (as the service maps it). */
export async function sessionIdOf(threadId: string): Promise<string> {
  if (SESSION_ID.test(threadId)) return threadId;
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(threadId));
  const hex = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  return `agui-${hex.slice(0, 40)}`;
}

/** A non-2xx answer of the service (its problem document's title and detail). */
export class AsrRunnerError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Record<string, unknown> | null,
  ) {
    const detail = problem ? `${problem.title ?? ""}: ${problem.detail ?? ""}` : "";
    super(`the service answered ${status} ${detail}`.trim());
    this.name = "AsrRunnerError";
  }
}

export class AsrAgentRunner extends AgentRunner {
  private readonly base: string;
  private readonly headers: Record<string, string>;
  private readonly agentName: string | undefined;
  private readonly attempts: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: AsrAgentRunnerOptions) {
    super();
    if (!options?.url || !options.apiKey) throw new TypeError("AsrAgentRunner needs url and apiKey");
    this.base = options.url.replace(/\/+$/, "");
    this.headers = { Authorization: `Bearer ${options.apiKey}` };
    this.agentName = options.agentName;
    this.attempts = options.resumeAttempts ?? 3;
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
  }

  run(request: AgentRunnerRunRequest): Observable<AgUiEvent> {
    const path = this.agentName ? `/v1/ag-ui/${encodeURIComponent(this.agentName)}` : "/v1/ag-ui";
    const body = { ...request.input, threadId: request.threadId };
    return this.stream(path, body, 0);
  }

  connect(request: AgentRunnerConnectRequest): Observable<AgUiEvent> {
    return this.stream("/v1/ag-ui/connect", { threadId: request.threadId }, this.attempts, true);
  }

  async isRunning(request: AgentRunnerIsRunningRequest): Promise<boolean> {
    const sessionId = await sessionIdOf(request.threadId);
    const reply = await this.fetchImpl(`${this.base}/v1/sessions/${encodeURIComponent(sessionId)}`, {
      headers: this.headers,
    });
    if (reply.status === 404) return false;
    if (!reply.ok) throw new AsrRunnerError(reply.status, await problemOf(reply));
    const session = (await reply.json()) as { active_run_id?: string | null };
    return Boolean(session.active_run_id);
  }

  async stop(request: AgentRunnerStopRequest): Promise<boolean | undefined> {
    const reply = await this.fetchImpl(`${this.base}/v1/ag-ui/stop`, {
      method: "POST",
      headers: { ...this.headers, "Content-Type": "application/json" },
      body: JSON.stringify({ threadId: request.threadId, ...(request.runId ? { runId: request.runId } : {}) }),
    });
    if (reply.status === 404) return false;
    if (!reply.ok) throw new AsrRunnerError(reply.status, await problemOf(reply));
    return ((await reply.json()) as { stopped: boolean }).stopped;
  }

  /** POST `body` to `path` and pass on the AG-UI events of the SSE answer; a connect
   * (`unknownIsEmpty`: a thread the service has never seen has nothing to show) stream cut
   * before its terminal event is resumed after the last frame id, up to `resumes` times. */
  private stream(path: string, body: unknown, resumes: number, unknownIsEmpty = false): Observable<AgUiEvent> {
    return new Observable<AgUiEvent>((subscriber) => {
      const abort = new AbortController();
      void this.pump(subscriber, path, body, resumes, unknownIsEmpty, abort.signal);
      return () => abort.abort();
    });
  }

  private async pump(
    subscriber: Subscriber<AgUiEvent>,
    path: string,
    body: unknown,
    resumes: number,
    unknownIsEmpty: boolean,
    signal: AbortSignal,
  ): Promise<void> {
    let lastId: string | null = null;
    let done = false;
    for (let attempt = 0; !done && attempt <= resumes; attempt++) {
      try {
        const headers: Record<string, string> = {
          ...this.headers,
          "Content-Type": "application/json",
          Accept: "text/event-stream",
        };
        if (lastId !== null) headers["Last-Event-ID"] = lastId;
        const reply = await this.fetchImpl(`${this.base}${path}`, {
          method: "POST",
          headers,
          body: JSON.stringify(body),
          signal,
        });
        if (reply.status === 404 && unknownIsEmpty && lastId === null) {
          subscriber.complete();
          return;
        }
        if (!reply.ok || !reply.body) {
          subscriber.error(new AsrRunnerError(reply.status, await problemOf(reply)));
          return;
        }
        let cut = false;
        const parser = createParser({
          onEvent: (message) => {
            if (done) return;
            const event = JSON.parse(message.data) as AgUiEvent & { code?: string };
            if (event.type === "RUN_ERROR" && event.code === "stream_cut" && resumes > 0) {
              cut = true; // the server ends the stream (shutdown): resume where it was
              return;
            }
            if (message.id !== undefined) lastId = message.id;
            subscriber.next(event);
            if (TERMINAL.has(String(event.type))) done = true;
          },
        });
        const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done: ended } = await reader.read();
          if (ended || cut) break;
          parser.feed(value);
        }
        if (!done && (resumes === 0 || lastId === null)) break;
      } catch (error) {
        if (signal.aborted) return;
        if (resumes === 0 || lastId === null || attempt === resumes) {
          subscriber.error(error);
          return;
        }
      }
    }
    if (done) subscriber.complete();
    else subscriber.error(new Error("the service's stream ended before the run did"));
  }
}

async function problemOf(reply: Response): Promise<Record<string, unknown> | null> {
  try {
    return (await reply.json()) as Record<string, unknown>;
  } catch {
    return null;
  }
}
