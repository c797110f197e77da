// The Agent Session Runtime web page. Plain JavaScript, no build step, no dependency.
//
// Rules this file keeps (the page's Content-Security-Policy allows nothing else):
// - every value that came from the server or the user is put in the page with textContent
//   or as an attribute value; never innerHTML, never a string that becomes markup or code;
// - no inline script or style: the HTML only references this file and app.css;
// - the API key lives in sessionStorage and is sent only in an Authorization header; the
//   live timeline (EventSource, which cannot send headers) uses a short-lived stream token
//   from POST /v1/stream-tokens in its query string.
"use strict";

(() => {
  const KEY_STORAGE = "asr.apiKey";
  // EventSource needs a listener per event name, so the page asks the server for its event
  // types (GET /v1/event-types, the catalogue generated from the payload models) once per
  // key, instead of carrying a list that a new event type would leave behind.
  let eventTypes = null;
  const DELTA = "delta";

  const $ = (id) => document.getElementById(id);

  const el = (tag, opts = {}, children = []) => {
    const node = document.createElement(tag);
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = String(opts.title);
    if (opts.attrs) for (const [k, v] of Object.entries(opts.attrs)) node.setAttribute(k, String(v));
    for (const child of children) node.append(child);
    return node;
  };

  // ------------------------------------------------------------------ state

  const state = {
    key: sessionStorage.getItem(KEY_STORAGE) || "",
    sessionId: null,
    source: null,         // EventSource of the open session
    lastSeq: 0,           // last seq rendered in the timeline
    seen: new Set(),      // seqs rendered (events may come twice: stream POST and timeline)
    types: new Set(),     // event types seen, for the filter
    live: new Map(),      // turn_id -> {row, textNode, source, frames}
    lastRunId: null,
    nextCursor: null,
    snapshotTimer: null,
    generation: 0,        // bumps on every session switch; stale callbacks check it
  };

  // ------------------------------------------------------------------ notices

  const notice = (message, kind = "info") => {
    const box = $("notice");
    box.textContent = message;
    box.className = `notice ${kind}`;
    box.hidden = !message;
  };

  const problemText = (status, body) => {
    if (body && typeof body === "object") {
      const parts = [body.title, body.detail, body.code && `(${body.code})`].filter(Boolean);
      if (parts.length) return `${status}: ${parts.join(" ")}`;
    }
    return `HTTP ${status}`;
  };

  // ------------------------------------------------------------------ HTTP

  class ApiError extends Error {
    constructor(status, body) {
      super(problemText(status, body));
      this.status = status;
      this.body = body;
    }
  }

  const headers = (extra = {}) => {
    const h = { Accept: "application/json", ...extra };
    if (state.key) h.Authorization = `Bearer ${state.key}`;
    return h;
  };

  async function api(method, path, body, extraHeaders = {}) {
    const init = { method, headers: headers(extraHeaders), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = text; }
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return { status: response.status, data, response };
  }

  const sessionPath = (id, rest = "") => `/v1/sessions/${encodeURIComponent(id)}${rest}`;

  // Run an action, showing a failure instead of throwing it away.
  const guarded = (fn) => async (...args) => {
    try {
      await fn(...args);
    } catch (err) {
      notice(err instanceof ApiError ? err.message : `Error: ${err.message || err}`, "error");
    }
  };

  // ------------------------------------------------------------------ key

  function showKeyState() {
    $("key-status").textContent = state.key ? "key set (this tab only)" : "no key";
    $("api-key").value = "";
    $("api-key").placeholder = state.key ? "••••••• (stored in this tab)" : "asr_…";
  }

  $("key-form").addEventListener("submit", guarded(async (ev) => {
    ev.preventDefault();
    const value = $("api-key").value.trim();
    if (!value) return;
    state.key = value;
    sessionStorage.setItem(KEY_STORAGE, value);
    showKeyState();
    notice("");
    await loadSessions();
  }));

  $("key-forget").addEventListener("click", () => {
    state.key = "";
    sessionStorage.removeItem(KEY_STORAGE);
    closeSession();
    $("session-list").replaceChildren();
    showKeyState();
  });

  // ------------------------------------------------------------------ sessions list

  // "user=alice, team=x" -> [["user","alice"],["team","x"]]
  const parsePairs = (text) =>
    text.split(/[,\n]/).map((p) => p.trim()).filter(Boolean).map((p) => {
      const at = p.indexOf("=");
      return at < 0 ? [p, ""] : [p.slice(0, at).trim(), p.slice(at + 1).trim()];
    }).filter(([k]) => k);

  const metadataText = (metadata) =>
    Object.entries(metadata || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");

  async function loadSessions(append = false) {
    if (!state.key) return;
    const params = new URLSearchParams({ limit: "50" });
    for (const [k, v] of parsePairs($("search-metadata").value)) params.append(`metadata.${k}`, v);
    const status = $("search-status").value;
    if (status) params.set("status", status);
    if (append && state.nextCursor) params.set("cursor", state.nextCursor);
    const { data } = await api("GET", `/v1/sessions?${params}`);
    const list = $("session-list");
    if (!append) list.replaceChildren();
    for (const s of data.data) list.append(sessionItem(s));
    state.nextCursor = data.next_cursor;
    $("sessions-more").hidden = !data.next_cursor;
    if (!append && !data.data.length) list.append(el("li", { cls: "muted", text: "no sessions" }));
  }

  const sessionInfo = (s) => `seq ${s.last_seq} · ${s.status}${s.parent_session_id ? " · fork" : ""}`;

  function sessionItem(s) {
    const button = el("button", { cls: "session-item", attrs: { type: "button", "data-session-id": s.session_id } }, [
      el("span", { cls: "sid", text: s.session_id }),
      el("span", { cls: "meta", text: metadataText(s.metadata) }),
      el("span", { cls: "muted info", text: sessionInfo(s) }),
    ]);
    button.addEventListener("click", guarded(() => openSession(s.session_id)));
    const li = el("li", {}, [button]);
    if (s.session_id === state.sessionId) li.classList.add("current");
    return li;
  }

  $("search-form").addEventListener("submit", guarded(async (ev) => {
    ev.preventDefault();
    await loadSessions();
  }));
  $("sessions-more").addEventListener("click", guarded(() => loadSessions(true)));

  $("create-form").addEventListener("submit", guarded(async (ev) => {
    ev.preventDefault();
    const metadata = Object.fromEntries(parsePairs($("create-metadata").value));
    const { data } = await api("POST", "/v1/sessions", { metadata });
    $("create-metadata").value = "";
    await loadSessions();
    await openSession(data.session_id);
  }));

  // ------------------------------------------------------------------ session view

  function closeSession() {
    state.generation += 1;
    if (state.source) state.source.close();
    state.source = null;
    state.sessionId = null;
    $("session-view").hidden = true;
    setStreamState("closed");
  }

  async function openSession(id) {
    closeSession();
    const generation = state.generation;
    state.sessionId = id;
    state.lastSeq = 0;
    state.seen = new Set();
    state.types = new Set();
    state.live = new Map();
    state.lastRunId = null;
    $("timeline").replaceChildren();
    $("type-filter").replaceChildren(el("option", { text: "all", attrs: { value: "" } }));
    $("pending-list").replaceChildren();
    delete $("pending-list").dataset.key;
    $("pending").hidden = true;
    $("run-status").hidden = true;
    $("fork-seq").value = "";
    $("session-title").textContent = id;
    $("session-lineage").textContent = "";
    $("session-view").hidden = false;
    $("session-view").dataset.sessionId = id;
    history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
    for (const li of $("session-list").children) {
      const b = li.querySelector("[data-session-id]");
      li.classList.toggle("current", !!b && b.dataset.sessionId === id);
    }
    notice("");
    const snapshot = await refreshSnapshot();
    if (generation !== state.generation) return;
    showLineage(snapshot);
    await openStream(generation);
    await refreshRuns();
  }

  function showLineage(s) {
    const box = $("session-lineage");
    box.replaceChildren();
    if (!s || !s.parent_session_id) return;
    const link = el("button", { cls: "link", text: s.parent_session_id, attrs: { type: "button", "data-parent": s.parent_session_id } });
    link.addEventListener("click", guarded(() => openSession(s.parent_session_id)));
    box.append("forked from ", link, ` at seq ${s.forked_from_seq}`);
  }

  // ------------------------------------------------------------------ live timeline

  function setStreamState(text) {
    const badge = $("stream-state");
    badge.textContent = text;
    badge.dataset.state = text;
  }

  async function listEventTypes() {
    if (eventTypes === null) {
      const { data } = await api("GET", "/v1/event-types");
      eventTypes = data.data.map((entry) => entry.type);
    }
    return eventTypes;
  }

  async function openStream(generation) {
    const id = state.sessionId;
    const types = await listEventTypes();
    const { data } = await api("POST", "/v1/stream-tokens", { session_id: id });
    if (generation !== state.generation) return;
    const params = new URLSearchParams({ token: data.token, include: "deltas" });
    if (state.lastSeq > 0) params.set("after_seq", String(state.lastSeq));
    const source = new EventSource(`${sessionPath(id, "/events/stream")}?${params}`);
    state.source = source;
    setStreamState("connecting");
    source.addEventListener("open", () => setStreamState("live"));
    const onEvent = (msg) => {
      if (generation !== state.generation) return;
      addEvent(JSON.parse(msg.data));
    };
    for (const type of types) source.addEventListener(type, onEvent);
    source.addEventListener(DELTA, (msg) => {
      if (generation === state.generation) addDelta(JSON.parse(msg.data), "timeline");
    });
    for (const control of ["overflow", "shutdown"]) {
      // The server ends the stream; EventSource reconnects with its Last-Event-ID.
      source.addEventListener(control, () => setStreamState("reconnecting"));
    }
    source.addEventListener("ERROR", (msg) => {
      let body = null;
      try { body = JSON.parse(msg.data); } catch { /* not JSON */ }
      notice(`Timeline: ${problemText(body && body.status, body)}`, "error");
    });
    source.addEventListener("error", () => {
      if (generation !== state.generation) return;
      if (source.readyState === EventSource.CLOSED) {
        // Refused (an expired token is a 401): a new token, then resume after the last seq.
        setStreamState("reconnecting");
        source.close();
        setTimeout(guarded(async () => {
          if (generation === state.generation) await openStream(generation);
        }), 1000);
      } else {
        setStreamState("reconnecting");
      }
    });
  }

  const shortId = (id) => (id ? String(id).slice(-8) : "");

  const timeText = (iso) => {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso || "");
    const pad = (n, w = 2) => String(n).padStart(w, "0");
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  };

  const itemText = (item) => {
    if (!item || typeof item !== "object") return "";
    if (item.type === "message") {
      const content = typeof item.content === "string" ? item.content
        : (item.content || []).map((p) => p.text || `[${p.type}]`).join(" ");
      return `${item.role}: ${content}`;
    }
    if (item.type === "function_call") return `call ${item.name}(${item.arguments || ""})`;
    if (item.type === "function_call_output") return `output ${item.call_id}: ${item.output}`;
    return JSON.stringify(item);
  };

  // One line that says what an event is about; the full payload is one click away.
  function summary(event) {
    const p = event.payload || {};
    switch (event.type) {
      case "FINAL_OUTPUT": return p.text;
      case "USER_INPUT": return p.item ? itemText(p.item) : JSON.stringify(p);
      case "MEMORY_ITEMS_APPENDED": return (p.items || []).map(itemText).join(" | ");
      case "RUN_FINISHED": return [p.status, p.stop_reason].filter(Boolean).join(" · ");
      case "AUTO_STOP": return [p.stop_reason || p.reason, p.budget].filter(Boolean).join(" · ");
      case "TOOL_CALL": return `${p.name || ""}(${typeof p.arguments === "string" ? p.arguments : JSON.stringify(p.arguments ?? "")})`;
      case "TOOL_RESULT": return `${p.call_id || ""}: ${typeof p.output === "string" ? p.output : JSON.stringify(p.output ?? p)}`;
      case "APPROVAL_REQUESTED": return `${p.name || ""} ${p.call_id || ""}`;
      case "APPROVAL_DECIDED": return `${p.decision || ""} ${p.call_id || ""}`;
      case "SESSION_FORKED": return `from ${p.parent_session_id} at seq ${p.forked_from_seq}`;
      case "METADATA_UPDATED": return metadataText(p.metadata || p.patch || p);
      case "MEMORY_COMPRESS": return [p.kind, p.strategy, p.tokens_before !== undefined ? `${p.tokens_before}→${p.tokens_after} tokens` : ""].filter(Boolean).join(" · ");
      case "ERROR": return p.detail || p.title || p.message || JSON.stringify(p);
      default: {
        const text = JSON.stringify(p);
        return text === "{}" ? "" : text;
      }
    }
  }

  function addEvent(event) {
    if (!event || typeof event.seq !== "number" || state.seen.has(event.seq)) return;
    state.seen.add(event.seq);
    const row = $("event-row").content.firstElementChild.cloneNode(true);
    row.dataset.seq = String(event.seq);
    row.dataset.type = event.type;
    row.querySelector(".seq").textContent = `#${event.seq}`;
    row.querySelector(".type").textContent = event.type;
    const time = row.querySelector(".time");
    time.textContent = timeText(event.created_at);
    time.dateTime = String(event.created_at || "");
    time.title = String(event.created_at || "");
    const ids = row.querySelector(".ids");
    ids.textContent = event.run_id ? `run …${shortId(event.run_id)}${event.turn_id ? ` / turn …${shortId(event.turn_id)}` : ""}` : "";
    ids.title = [event.run_id, event.turn_id].filter(Boolean).join(" / ");
    const text = summary(event);
    row.querySelector(".summary").textContent = text == null ? "" : String(text);
    const pre = row.querySelector(".payload");
    pre.textContent = JSON.stringify(event.payload, null, 2);
    row.querySelector(".toggle").addEventListener("click", () => {
      pre.hidden = !pre.hidden;
      row.classList.toggle("open", !pre.hidden);
    });
    row.querySelector(".fork-here").addEventListener("click", () => {
      $("fork-seq").value = String(event.seq);
      $("fork-seq").focus();
    });
    insertRow(row, event.seq);
    state.lastSeq = Math.max(state.lastSeq, event.seq);
    noteType(event.type);
    applyFilter(row);
    if (event.type === "FINAL_OUTPUT" && event.turn_id && state.live.has(event.turn_id)) {
      state.live.get(event.turn_id).row.classList.add("done");
    }
    if (event.run_id) state.lastRunId = event.run_id;
    if (event.type === "RUN_STARTED" || event.type === "RUN_FINISHED" || event.type === "APPROVAL_DECIDED"
        || event.type === "TOOL_RESULT" || event.type === "AUTO_STOP") {
      refreshRunsSoon();
    }
    refreshSnapshotSoon();
    updateCount();
  }

  // Rows stay in seq order whichever way they arrived; live text rows stay where they began.
  function insertRow(row, seq) {
    const timeline = $("timeline");
    let after = timeline.lastElementChild;
    while (after && after.dataset.seq && Number(after.dataset.seq) > seq) after = after.previousElementSibling;
    if (after && after.dataset.seq === undefined) {
      // a live-text row: an event older than it goes above it
      let probe = after;
      while (probe && probe.dataset.seq === undefined) probe = probe.previousElementSibling;
      if (probe && Number(probe.dataset.seq) > seq) after = probe.previousElementSibling;
    }
    if (after) after.after(row); else timeline.prepend(row);
  }

  // Delta frames: growing assistant text, one row per model turn. A turn's deltas may reach
  // the page twice (a stream-mode POST and the timeline both carry them); the first source
  // to deliver a turn's deltas keeps it. A stream that (re)connects mid-turn starts with a
  // catch-up frame holding the turn's whole text so far: it replaces the row's text.
  function addDelta(frame, source) {
    if (!frame || typeof frame.text !== "string") return;
    const turn = frame.turn_id || frame.run_id || "turn";
    let live = state.live.get(turn);
    if (!live) {
      const text = el("span", { cls: "live-text" });
      const row = el("li", { cls: "event live", attrs: { "data-type": DELTA, "data-turn": turn } }, [
        el("div", { cls: "event-line" }, [
          el("span", { cls: "seq", text: "…" }),
          el("span", { cls: "type", text: "assistant" }),
          el("span", { cls: "ids", text: frame.run_id ? `run …${shortId(frame.run_id)} / turn …${shortId(frame.turn_id)}` : "" }),
          text,
        ]),
      ]);
      live = { row, text, source, frames: 0 };
      state.live.set(turn, live);
      $("timeline").append(row);
      noteType(DELTA);
      applyFilter(row);
    }
    if (live.source !== source) return;
    live.frames += 1;
    live.row.dataset.frames = String(live.frames);
    if (frame.catch_up) live.text.textContent = frame.text;
    else live.text.textContent += frame.text;
  }

  // ------------------------------------------------------------------ type filter

  function noteType(type) {
    if (state.types.has(type)) return;
    state.types.add(type);
    const select = $("type-filter");
    const option = el("option", { text: type === DELTA ? "delta (live text)" : type, attrs: { value: type } });
    const later = [...select.options].slice(1).find((o) => o.value > type);
    select.insertBefore(option, later || null);
  }

  function applyFilter(row) {
    const wanted = $("type-filter").value;
    row.hidden = !!wanted && row.dataset.type !== wanted;
  }

  function updateCount() {
    const rows = [...$("timeline").children];
    const shown = rows.filter((r) => !r.hidden).length;
    $("timeline-count").textContent = `${shown} of ${rows.length} shown`;
  }

  $("type-filter").addEventListener("change", () => {
    for (const row of $("timeline").children) applyFilter(row);
    updateCount();
  });

  // ------------------------------------------------------------------ snapshot panel

  function refreshSnapshotSoon() {
    clearTimeout(state.snapshotTimer);
    state.snapshotTimer = setTimeout(guarded(refreshSnapshot), 300);
  }

  async function refreshSnapshot() {
    const id = state.sessionId;
    if (!id) return null;
    const { data } = await api("GET", sessionPath(id));
    if (id !== state.sessionId) return null;
    const rows = [
      ["session", data.session_id],
      ["status", data.status],
      ["last seq", data.last_seq],
      ["version", data.version],
      ["estimated tokens", data.estimated_tokens],
      ["usage", data.usage],
      ["items", data.counts && data.counts.items],
      ["messages", data.counts && data.counts.messages],
      ["tool calls", data.counts && data.counts.function_calls],
      ["tool outputs", data.counts && data.counts.function_call_outputs],
      ["processes", data.counts && data.counts.processes],
      ["window", data.max_items == null ? "unbounded" : `${data.max_items} items${data.truncated ? " (truncated)" : ""}`],
      ["summary", data.has_summary ? "yes" : "no"],
      ["breaker", data.breaker],
      ["last compact", data.last_compact],
      ["metadata", metadataText(data.metadata)],
      ["binding", data.binding],
      ["active run", data.active_run_id],
    ];
    for (const b of $("session-list").querySelectorAll("[data-session-id]")) {
      if (b.dataset.sessionId === id) b.querySelector(".info").textContent = sessionInfo(data);
    }
    const list = $("snapshot");
    list.replaceChildren();
    for (const [name, value] of rows) {
      const text = value == null ? "—" : typeof value === "object" ? JSON.stringify(value) : String(value);
      list.append(el("dt", { text: name }), el("dd", { text, attrs: { "data-field": name } }));
    }
    return data;
  }

  $("snapshot-refresh").addEventListener("click", guarded(refreshSnapshot));

  // ------------------------------------------------------------------ runs

  let runsTimer = null;
  function refreshRunsSoon() {
    clearTimeout(runsTimer);
    runsTimer = setTimeout(guarded(refreshRuns), 150);
  }

  async function refreshRuns() {
    const id = state.sessionId;
    if (!id) return;
    const { data } = await api("GET", sessionPath(id, "/runs"));
    if (id !== state.sessionId) return;
    const latest = data.data[0];
    if (latest) showRun(latest);
  }

  function showRun(run) {
    state.lastRunId = run.run_id;
    $("run-status").hidden = false;
    $("run-id").textContent = run.run_id;
    $("run-state").textContent = run.status;
    $("run-state").dataset.status = run.status;
    const stop = $("run-stop");
    stop.textContent = run.stop_reason || "";
    stop.hidden = !run.stop_reason;
    stop.dataset.stop = run.stop_reason || "";
    $("run-output").textContent = run.error ? problemText(run.error.status, run.error) : (run.output || "");
    $("run-cancel").hidden = !(run.status === "running" || run.status === "queued");
    showPending(run);
  }

  function showPending(run) {
    const list = $("pending-list");
    const pending = run.pending || [];
    $("pending").hidden = pending.length === 0;
    // The same calls are already shown: keep them (and whatever is typed into them).
    const key = [run.run_id, ...pending.map((c) => c.call_id)].join(" ");
    if (list.dataset.key === key) return;
    list.dataset.key = key;
    list.replaceChildren();
    for (const call of pending) {
      const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments ?? {});
      const li = el("li", { cls: "pending-call", attrs: { "data-call-id": call.call_id, "data-kind": call.kind } }, [
        el("span", { cls: "badge", text: call.kind === "approval" ? "approval" : "tool call" }),
        el("code", { text: `${call.name || "?"}(${args})` }),
        el("span", { cls: "muted", text: call.call_id }),
      ]);
      if (call.kind === "approval") {
        const approve = el("button", { cls: "approve", text: "Approve", attrs: { type: "button" } });
        const reject = el("button", { cls: "reject", text: "Reject", attrs: { type: "button" } });
        approve.addEventListener("click", guarded(() => decide(call.call_id, "approve")));
        reject.addEventListener("click", guarded(() => decide(call.call_id, "reject")));
        li.append(approve, reject);
      } else {
        const output = el("input", { cls: "tool-output", attrs: { type: "text", placeholder: "output", "aria-label": `output for ${call.call_id}` } });
        const send = el("button", { cls: "send-output", text: "Send output", attrs: { type: "button" } });
        send.addEventListener("click", guarded(() => answer(call.call_id, output.value)));
        li.append(output, send);
      }
      list.append(li);
    }
  }

  const mode = () => $("run-mode").value;

  async function answer(callId, output) {
    await continueWith(sessionPath(state.sessionId, "/tool-outputs"), { outputs: [{ call_id: callId, output }], mode: mode() });
  }

  async function decide(callId, decision) {
    await continueWith(sessionPath(state.sessionId, "/approvals"), { call_id: callId, decision, mode: mode() });
  }

  // tool-outputs and approvals answer like a run start (wait / stream / background)
  async function continueWith(path, body) {
    $("pending").hidden = true;
    await startRun(path, body);
  }

  const names = (text) => text.split(/[,\s]+/).map((s) => s.trim()).filter(Boolean);

  $("run-form").addEventListener("submit", guarded(async (ev) => {
    ev.preventDefault();
    const body = { input: $("run-input").value, mode: mode() };
    const tools = names($("run-client-tools").value);
    if (tools.length) body.client_tools = tools.map((name) => ({ name }));
    const approval = names($("run-approval").value);
    if (approval.length) body.approval_required = approval;
    $("run-input").value = "";
    await startRun(sessionPath(state.sessionId, "/runs"), body);
  }));

  async function startRun(path, body) {
    const generation = state.generation;
    notice("");
    $("run-send").disabled = true;
    try {
      if (body.mode === "stream") {
        await streamRun(path, body, generation);
      } else {
        const { data } = await api("POST", path, body);
        if (generation !== state.generation) return;
        if (data && data.run_id) showRun(data);
      }
    } finally {
      $("run-send").disabled = false;
    }
    if (generation === state.generation) refreshRunsSoon();
  }

  // stream mode: POST, then read the response's Server-Sent Events as they come.
  async function streamRun(path, body, generation) {
    const response = await fetch(path, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
      cache: "no-store",
    });
    if (!response.ok) {
      let data = null;
      try { data = await response.json(); } catch { /* empty */ }
      throw new ApiError(response.status, data);
    }
    const type = response.headers.get("Content-Type") || "";
    if (!type.startsWith("text/event-stream")) {
      const data = await response.json();   // tool-outputs without a run: no stream
      if (data && data.run_id) showRun(data);
      return;
    }
    $("run-status").hidden = false;
    $("run-state").textContent = "running";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (generation !== state.generation) { reader.cancel(); return; }
        handleFrame(block);
        await null;  // one frame at a time: the page (and its observers) see the text grow
      }
    }
  }

  function handleFrame(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const at = line.indexOf(":");
      const field = at < 0 ? line : line.slice(0, at);
      let value = at < 0 ? "" : line.slice(at + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return;
    let parsed;
    try { parsed = JSON.parse(data.join("\n")); } catch { return; }
    if (name === DELTA || (parsed && parsed.type === DELTA && parsed.seq === undefined)) addDelta(parsed, "post");
    else if (name === "shutdown") notice("The server is shutting down; the timeline reconnects by itself.", "info");
    else if (parsed && typeof parsed.seq === "number") addEvent(parsed);
  }

  $("run-cancel").addEventListener("click", guarded(async () => {
    if (!state.lastRunId) return;
    const { data } = await api("POST", sessionPath(state.sessionId, `/runs/${encodeURIComponent(state.lastRunId)}/cancel`));
    showRun(data);
  }));

  // ------------------------------------------------------------------ save, fork, compact

  $("save-session").addEventListener("click", guarded(async () => {
    const { data } = await api("POST", sessionPath(state.sessionId, "/save"));
    notice(`Saved: snapshot at seq ${data.snapshot_seq}, version ${data.version}.`, "ok");
  }));

  $("fork-session").addEventListener("click", guarded(async () => {
    const raw = $("fork-seq").value.trim();
    const body = raw ? { at_seq: Number(raw) } : {};
    const { data } = await api("POST", sessionPath(state.sessionId, "/fork"), body);
    await loadSessions();
    await openSession(data.session_id);
    notice(`Forked into ${data.session_id} at seq ${data.forked_from_seq}.`, "ok");
  }));

  $("compact-session").addEventListener("click", guarded(async () => {
    const strategy = $("compact-strategy").value;
    const { data } = await api("POST", sessionPath(state.sessionId, "/compact"), strategy ? { strategy } : {});
    const r = data.result || {};
    const parts = [r.strategy, r.tokens_before !== undefined ? `${r.tokens_before}→${r.tokens_after} tokens` : "", `${data.items} items now`];
    notice(`Compacted: ${parts.filter(Boolean).join(", ")}.`, "ok");
  }));

  $("reset-breaker").addEventListener("click", guarded(async () => {
    const { data } = await api("POST", sessionPath(state.sessionId, "/compact"), { reset_breaker: true });
    notice(`Breaker: ${JSON.stringify(data.breaker)}.`, "ok");
  }));

  // ------------------------------------------------------------------ start

  showKeyState();
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("session");
  if (state.key) {
    guarded(async () => {
      await loadSessions();
      if (fromHash) await openSession(fromHash);
    })();
  }
})();
