// A minimal chat page on @ag-ui/client, as any AG-UI frontend would be: an HttpAgent pointed
// at POST /v1/ag-ui. Bundled by `npm run bundle` (esbuild) into dist/chat.js, which
// tests/browser/test_ag_ui_chat.py serves from another loopback origin. The API's address
// and key come in the URL's fragment (test only: a real page never puts a key in a URL; a
// CopilotKit app keeps it in its server-side runtime).
import { HttpAgent } from "@ag-ui/client";

const params = new URLSearchParams(location.hash.slice(1));
const agent = new HttpAgent({
  url: `${params.get("api")}/v1/ag-ui`,
  headers: { Authorization: `Bearer ${params.get("key")}` },
  threadId: params.get("thread") || undefined,
});
const result = { threadId: agent.threadId, types: [], replies: [], error: null };
window.__chat = result;

const log = document.getElementById("messages");
const status = document.getElementById("status");

function render() {
  log.replaceChildren(
    ...agent.messages.map((m) => {
      const li = document.createElement("li");
      li.className = m.role;
      li.textContent = `${m.role}: ${typeof m.content === "string" ? m.content : ""}`;
      return li;
    }),
  );
}

async function send(text) {
  agent.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
  render();
  status.textContent = "running";
  try {
    const { result: reply } = await agent.runAgent(
      {},
      {
        onEvent: ({ event }) => void result.types.push(event.type),
        onMessagesChanged: () => render(),
      },
    );
    result.replies.push(reply);
    status.textContent = `replied ${result.replies.length}`;
  } catch (error) {
    result.error = String(error);
    status.textContent = "error";
  }
}

document.getElementById("form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("input");
  const text = input.value;
  input.value = "";
  void send(text);
});
status.textContent = "ready";
