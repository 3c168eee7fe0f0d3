// One run in the message stream: the prompt, Claude's text, tool calls, errors and the footer.

import { el, formatCost, formatDuration } from "./dom.js";
import { editDiff } from "./edit-diff.js";
import { LiveMarkdown } from "./live-markdown.js";
import { foldIfLong } from "./show-more.js";

export const ACTIVE_STATUSES = new Set(["queued", "running", "waiting_for_user"]);

export const STATUS_LABELS = {
  queued: "Queued",
  running: "Running",
  waiting_for_user: "Waiting for you",
  completed: "Completed",
  failed: "Failed",
  cancelled: "Cancelled",
  timed_out: "Timed out",
  unknown: "Ended",
};

/** A run's status as a chip: the run footer's and the sidebar's. */
export function statusChip(status) {
  return el("span", { class: `status-chip is-${status}`, text: STATUS_LABELS[status] || status });
}

// Claude's ways of asking: an error result from one means the question closed unanswered.
const QUESTION_TOOLS = new Set(["mcp__ask-user__ask_user", "AskUserQuestion"]);

const SUMMARY_KEYS = ["command", "file_path", "notebook_path", "pattern", "url", "query", "description", "question", "prompt"];
const SUMMARY_MAX = 140;

/** "Bash", or "ask-user › ask_user" for an MCP tool. */
export function toolLabel(name) {
  const match = /^mcp__(.+?)__(.+)$/.exec(name || "");
  return match ? `${match[1]} › ${match[2]}` : name || "tool";
}

/** One line that says what a tool call does, from its input. */
export function toolSummary(input) {
  if (!input || typeof input !== "object") return "";
  let text = "";
  if (Array.isArray(input.questions) && input.questions.length) {
    text = input.questions.map((q) => q.question).join(" · ");
  } else if (Array.isArray(input.todos)) {
    text = `${input.todos.length} to-do items`;
  } else {
    const key = SUMMARY_KEYS.find((name) => typeof input[name] === "string" && input[name]);
    const value = key ? input[key] : Object.values(input).find((v) => typeof v === "string" && v);
    text = value || "";
  }
  text = text.replace(/\s+/g, " ").trim();
  return text.length > SUMMARY_MAX ? `${text.slice(0, SUMMARY_MAX - 1)}…` : text;
}

export class RunView {
  /** @param renderMarkdown async (text) => sanitized HTML, for text while it streams */
  constructor(runId, { renderMarkdown } = {}) {
    this.runId = runId;
    this.renderMarkdown = renderMarkdown || null;
    this.finalError = null;
    this.status = "queued";
    this.lastId = 0;
    this.promptShown = false;
    this.openText = new Map(); // "parent:index" → {bubble, live}
    this.tools = new Map(); // tool_use_id → {element, state, progress}
    this.result = null;
    this.body = el("div", { class: "run-body" });
    this.footer = el("footer", { class: "run-footer", hidden: true });
    // From the prompt to Claude's first word, and whenever it works without streaming text.
    this.working = el(
      "div",
      { class: "run-working", hidden: true },
      el("span", { class: "spinner", "aria-hidden": "true" }),
      "Claude is working…",
    );
    this.element = el("article", { class: "run", dataset: { runId: String(runId) } }, this.body, this.working, this.footer);
  }

  /** False when this event id was already shown (replay after a reconnect or reload). */
  accept(id) {
    if (id && id <= this.lastId) return false;
    if (id) this.lastId = id;
    return true;
  }

  get active() {
    return ACTIVE_STATUSES.has(this.status);
  }

  add(node) {
    this.body.append(node);
    return node;
  }

  showPrompt(text, user) {
    if (this.promptShown) return;
    this.promptShown = true;
    this.body.prepend(
      el("div", { class: "msg msg-user" }, el("div", { class: "msg-who", text: user || "You" }), el("div", { class: "msg-text", text })),
    );
  }

  showSession(data) {
    const parts = [data.model ? `model ${data.model}` : "session started"];
    if (data.permission_mode) parts.push(`${data.permission_mode} mode`);
    const meta = el("div", { class: "run-meta" }, parts.join(" · "));
    for (const server of data.mcp_servers || []) {
      const ok = server.status === "connected";
      meta.append(" · ", el("span", { class: ok ? "mcp-ok" : "mcp-bad", text: `${server.name}: ${server.status}` }));
    }
    this.add(meta);
  }

  /** Shown while the run is queued or running and no text is streaming. */
  updateWorking() {
    this.working.hidden = !(this.active && this.status !== "waiting_for_user" && this.openText.size === 0);
  }

  appendDelta(data) {
    const key = `${data.parent_tool_use_id || ""}:${data.index ?? 0}`;
    let open = this.openText.get(key);
    if (!open) {
      const bubble = this.add(this.textBubble(data.parent_tool_use_id, true));
      const target = bubble.querySelector(".msg-text");
      open = { bubble, live: this.renderMarkdown ? new LiveMarkdown(target, this.renderMarkdown) : null };
      this.openText.set(key, open);
    }
    if (open.live) open.live.append(data.text || "");
    else open.bubble.querySelector(".msg-text").append(document.createTextNode(data.text || ""));
  }

  /** The complete block replaces its streamed text with the server's sanitized Markdown. */
  completeText(data) {
    const prefix = `${data.parent_tool_use_id || ""}:`;
    const key = [...this.openText.keys()].find((k) => k.startsWith(prefix));
    const open = key === undefined ? null : this.openText.get(key);
    if (key !== undefined) this.openText.delete(key);
    open?.live?.stop();
    const bubble = open ? open.bubble : this.add(this.textBubble(data.parent_tool_use_id, false));
    const target = bubble.querySelector(".msg-text");
    target.classList.remove("is-streaming", "markdown-live");
    target.classList.add("markdown");
    // Sanitized server-side (nh3): the page takes HTML from the server's renderer only.
    target.innerHTML = data.html || "";
    if (!data.html) target.textContent = data.text || "";
    foldIfLong(target);
  }

  /** The run ended: text still marked as streaming stops, without its cursor. */
  stopStreaming() {
    for (const open of this.openText.values()) {
      open.live?.stop();
      open.bubble.querySelector(".msg-text").classList.remove("is-streaming");
    }
    this.openText.clear();
  }

  textBubble(parentToolUseId, streaming) {
    const text = el("div", { class: streaming ? "msg-text is-streaming" : "msg-text" });
    const classes = parentToolUseId ? "msg msg-claude is-subagent" : "msg msg-claude";
    return el("div", { class: classes }, el("div", { class: "msg-who", text: parentToolUseId ? "Subagent" : "Claude" }), text);
  }

  showToolUse(data) {
    const state = el("span", { class: "tool-state is-pending", text: "running" });
    const result = el("div", { class: "tool-result", hidden: true });
    const details = el(
      "details",
      { class: "tool", dataset: { toolUseId: data.id || "" } },
      el(
        "summary",
        {},
        el("span", { class: "tool-name", text: toolLabel(data.name) }),
        el("span", { class: "tool-summary", text: toolSummary(data.input) }),
        state,
      ),
      editDiff(data.name, data.input),
      el("div", { class: "tool-section-title", text: "Input" }),
      el("pre", { class: "tool-pre", text: JSON.stringify(data.input ?? {}, null, 2) }),
      result,
    );
    this.add(details);
    if (data.id) this.tools.set(data.id, { details, state, result, name: data.name });
  }

  showToolResult(data) {
    const tool = this.tools.get(data.tool_use_id);
    if (!tool) return;
    // A question nobody answered (timed out, cancelled) is not a failure: a neutral chip.
    const unanswered = Boolean(data.is_error) && QUESTION_TOOLS.has(tool.name);
    if (unanswered) {
      tool.state.className = "tool-state is-closed";
      tool.state.textContent = "no answer";
    } else {
      tool.state.className = data.is_error ? "tool-state is-error" : "tool-state is-ok";
      tool.state.textContent = data.is_error ? "error" : "done";
      tool.details.classList.toggle("is-error", Boolean(data.is_error));
    }
    tool.result.hidden = false;
    tool.result.replaceChildren(
      el("div", { class: "tool-section-title", text: data.is_error ? "Error" : "Result" }),
      el("pre", { class: "tool-pre", text: data.content || "(empty)" }),
    );
  }

  showToolProgress(data) {
    const tool = this.tools.get(data.tool_use_id);
    if (!tool || !tool.state.classList.contains("is-pending")) return;
    const seconds = Math.round(Number(data.elapsed_time_seconds) || 0);
    tool.state.textContent = seconds ? `running · ${seconds} s` : "running";
  }

  showError(data) {
    const bubble = this.add(el("div", { class: "msg msg-error" }, el("strong", {}, "Error: "), data.message || "Something went wrong."));
    if (data.final) this.finalError = { bubble, message: data.message || "" };
  }

  setResult(data) {
    this.result = data;
  }

  /** Status, cost and duration; shown once the run has ended. */
  setStatus(data) {
    this.status = data.status || this.status;
    this.updateWorking();
    if (this.active) return;
    this.stopStreaming();
    this.updateWorking();
    // A cancel is what the user asked for: its closing sentence is a notice, not an error.
    if (this.status === "cancelled" && this.finalError) {
      this.finalError.bubble.className = "msg msg-notice";
      this.finalError.bubble.replaceChildren(this.finalError.message || "Cancelled.");
      this.finalError = null;
    }
    for (const tool of this.tools.values()) {
      if (tool.state.classList.contains("is-pending")) {
        tool.state.className = "tool-state";
        tool.state.textContent = "stopped";
      }
    }
    const cost = data.cost_usd ?? this.result?.cost_usd;
    const duration = data.duration_ms ?? this.result?.duration_ms;
    const turns = this.result?.num_turns;
    const parts = [
      statusChip(this.status),
      formatCost(cost) && el("span", { class: "run-cost", text: formatCost(cost) }),
      formatDuration(duration) && el("span", { class: "run-duration", text: formatDuration(duration) }),
      turns ? el("span", { text: turns === 1 ? "1 turn" : `${turns} turns` }) : null,
    ];
    this.footer.replaceChildren(...parts.filter(Boolean));
    this.footer.hidden = false;
  }
}
