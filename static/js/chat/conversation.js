// The open conversation: its runs, their live streams, question and permission cards, status and Cancel.

import { withId } from "./api.js";
import { ChangesCard } from "./changes-card.js";
import { isNearEnd, isTextEntry, scrollToEnd } from "./dom.js";
import { PermissionCard } from "./permission-card.js";
import { QuestionCard } from "./question-card.js";
import { ACTIVE_STATUSES, RunView, STATUS_LABELS } from "./render.js";
import { RunStream } from "./stream.js";
import { Talk } from "./talk.js";

// After an answer, the first of these shows Claude went on: the answered card collapses.
const CONTINUATION_EVENTS = new Set(["tool_result", "assistant_text", "text_delta", "done"]);
const FINAL_RUN_STATUSES = new Set(["completed", "failed"]);

function claudeContinued(name, data) {
  return CONTINUATION_EVENTS.has(name) || (name === "run_status" && FINAL_RUN_STATUSES.has(data.status));
}

export class ConversationView {
  /**
   * @param parts {stream, welcome, title, status, cancel, connection, prompt} elements of the page
   * @param config the root element's dataset (URLs, username)
   * @param hooks {onChange(view), onRunEnded(view)}: the page updates the composer and sidebar
   */
  constructor({ parts, config, api, clicks, attention, hooks }) {
    this.parts = parts;
    this.config = config;
    this.api = api;
    // A person's answers and decisions: over the click channel, else their endpoints.
    this.clicks = clicks;
    this.attention = attention;
    this.hooks = hooks;
    this.id = null;
    this.generation = 0;
    this.runs = new Map();
    this.streams = new Map();
    this.cards = new Map();
    this.changesCards = new Map(); // run id → its changes card
    this.talk = new Talk(this);
    parts.cancel.addEventListener("click", () => this.cancel());
  }

  get latestRun() {
    return [...this.runs.values()].at(-1) || null;
  }

  get busy() {
    return Boolean(this.latestRun?.active);
  }

  /** Empty the stream: stop listening and forget every card. */
  clear(title = "New conversation") {
    this.generation += 1;
    for (const stream of this.streams.values()) stream.close();
    for (const card of this.cards.values()) {
      card.destroy();
      this.attention.forget(card);
    }
    this.streams.clear();
    this.cards.clear();
    this.changesCards.clear();
    this.runs.clear();
    this.id = null;
    this.parts.stream.replaceChildren(this.parts.welcome);
    this.parts.welcome.hidden = false;
    this.parts.title.textContent = title;
    this.setConnection("closed");
    this.refreshHeader();
  }

  /** Show a stored conversation again, then follow its active run, if any, from event 0. */
  async open(conversationId) {
    this.clear("Loading…");
    const generation = this.generation;
    const detail = await this.api.get(withId(this.config.conversationUrl, conversationId));
    if (generation !== this.generation) return; // another conversation was opened meanwhile
    this.id = detail.id;
    this.parts.title.textContent = detail.title || `Conversation ${detail.id}`;
    for (const record of detail.runs || []) {
      const run = this.addRun(record.run_id);
      for (const event of record.events || []) this.dispatch(run, event.event, event.id, event.data, false);
      if (record.reverted_at) this.changesCards.get(record.run_id)?.markReverted();
      if (record.active) {
        run.status = record.status;
        this.follow(run, record.events_url);
      } else if (!record.events?.length) {
        // The event log is gone: say at least what was asked and how it ended.
        run.showPrompt(record.prompt, "");
        if (record.error) run.showError({ message: record.error, final: true });
        run.setStatus({ status: record.status });
      }
    }
    this.refreshHeader();
    scrollToEnd(this.parts.stream);
  }

  /** Send a prompt in this conversation (or start a new one). Rejects with ApiError. */
  async start(prompt) {
    const body = { prompt };
    if (this.id) body.conversation_id = this.id;
    const generation = this.generation;
    const started = await this.api.post(this.config.runsUrl, body);
    if (generation !== this.generation) return started;
    if (!this.id) {
      this.id = started.conversation_id;
      this.parts.title.textContent = prompt.slice(0, 80);
    }
    const run = this.addRun(started.run_id);
    run.showPrompt(prompt, "You");
    run.status = "queued";
    run.updateWorking();
    this.follow(run, started.events_url);
    this.refreshHeader();
    scrollToEnd(this.parts.stream);
    return started;
  }

  async cancel() {
    const run = this.latestRun;
    if (!run?.active) return;
    this.parts.cancel.disabled = true;
    try {
      await this.api.post(withId(this.config.cancelUrl, run.runId));
    } catch (error) {
      // 409: it finished meanwhile; the stream will say how.
      if (error.status !== 409) run.showError({ message: error.detail });
      this.parts.cancel.disabled = false;
    }
  }

  addRun(runId) {
    const renderMarkdown = this.config.markdownUrl
      ? async (text) => (await this.api.post(this.config.markdownUrl, { text })).html
      : null;
    const run = new RunView(runId, { renderMarkdown });
    this.runs.set(runId, run);
    this.parts.welcome.hidden = true;
    this.parts.stream.append(run.element);
    return run;
  }

  /** A run the conversation went on with (a message or a late answer started it): show and follow it. */
  followRun(runId, eventsUrl) {
    if (this.runs.has(runId) || !eventsUrl) return;
    const run = this.addRun(runId);
    run.status = "queued";
    this.follow(run, eventsUrl);
    this.refreshHeader();
  }

  follow(run, eventsUrl) {
    const stream = new RunStream(eventsUrl, {
      after: run.lastId,
      onEvent: (name, id, data) => this.dispatch(run, name, id, data, true),
      onConnection: (state) => this.setConnection(state),
    });
    this.streams.set(run.runId, stream);
  }

  /** Every event, stored or live, goes through here once: duplicates are dropped by id. */
  dispatch(run, name, id, data, live) {
    if (!run.accept(id)) return;
    const follow = isNearEnd(this.parts.stream);
    if (claudeContinued(name, data)) {
      for (const card of this.cards.values()) if (card.runId === run.runId) card.markContinued();
    }
    switch (name) {
      case "prompt":
        run.showPrompt(data.text, data.user === this.config.username ? "You" : data.user);
        break;
      case "session":
        run.showSession(data);
        break;
      case "text_delta":
        run.appendDelta(data);
        break;
      case "assistant_text":
        run.completeText(data);
        break;
      case "tool_use":
        run.showToolUse(data);
        break;
      case "tool_result":
        run.showToolResult(data);
        break;
      case "tool_progress":
        run.showToolProgress(data);
        break;
      case "result":
        run.setResult(data);
        break;
      case "error":
        run.showError(data);
        break;
      case "run_status":
        run.setStatus(data);
        break;
      case "ask_user_question":
        this.showQuestion(run, data, live);
        break;
      case "ask_user_answered":
        this.cards.get(data.question_id)?.markAnswered(data);
        break;
      case "ask_user_expired":
        this.cards.get(data.question_id)?.markExpired(data);
        break;
      case "ask_user_delivered":
        this.cards.get(data.question_id)?.markDelivered(data);
        break;
      case "permission_request":
        this.showPermission(run, data, live);
        break;
      case "permission_decided":
        this.permissionCard(data.request_id)?.markDecided(data);
        break;
      case "permission_expired":
        this.permissionCard(data.request_id)?.markExpired(data);
        break;
      case "changes":
        this.showChanges(run, data);
        break;
      case "done":
        this.runEnded(run, data, live);
        break;
      default:
        break;
    }
    this.talk.handle(run, name, data);
    run.updateWorking();
    if (name === "run_status" || name === "done") this.refreshHeader();
    if (follow) scrollToEnd(this.parts.stream);
  }

  showQuestion(run, data, live) {
    if (!data.question_id || this.cards.has(data.question_id)) return;
    const card = new QuestionCard(data, {
      submit: (body) => this.clicks.answer(body),
      username: this.config.username,
      onChange: (changed) => this.attention.update(changed),
    });
    this.place(run, card, live);
  }

  /** A tool call waiting for approval; each card answers for its own request_id. */
  showPermission(run, data, live) {
    if (!data.request_id || this.cards.has(data.request_id)) return;
    const card = new PermissionCard(data, {
      submit: (body) => this.clicks.decide(body),
      username: this.config.username,
      onChange: (changed) => this.attention.update(changed),
    });
    this.place(run, card, live);
  }

  /** The files the run changed, shown once it has ended; each opens to its diff. */
  showChanges(run, data) {
    const card = new ChangesCard(data, {
      api: this.api,
      changesUrl: this.config.changesUrl,
      revertUrl: this.config.revertUrl,
      filesUrl: this.filesUrl(),
    });
    this.changesCards.set(run.runId, card);
    run.add(card.element);
  }

  /** The file browser on this conversation's worktree (or the project's default branch). */
  filesUrl() {
    return this.id ? `${this.config.filesPageUrl}?conversation=${encodeURIComponent(this.id)}` : this.config.filesPageUrl;
  }

  permissionCard(requestId) {
    const card = this.cards.get(requestId);
    return card instanceof PermissionCard ? card : null;
  }

  /** Put a new card in its run; a live one also notifies and takes the keyboard. */
  place(run, card, live) {
    card.runId = run.runId;
    // A card is the one place in the stream a screen reader follows: what it says next
    // (sent, answered, expired) is read out; deltas and tool calls are not.
    card.element.setAttribute("aria-live", "polite");
    this.cards.set(card.id, card);
    run.add(card.element);
    this.attention.update(card);
    if (!live) return;
    this.attention.notify(card);
    // Put the keyboard on the card unless the user is typing somewhere else.
    const active = document.activeElement;
    if (!isTextEntry(active) || active === this.parts.prompt) card.focus();
  }

  runEnded(run, data, live) {
    if (run.active) run.setStatus({ status: data.status || "unknown" });
    for (const card of this.cards.values()) {
      if (card.runId === run.runId) card.markOrphaned();
    }
    this.streams.get(run.runId)?.close();
    this.streams.delete(run.runId);
    if (live) this.hooks.onRunEnded(this);
  }

  setConnection(state) {
    const show = state === "reconnecting" && this.streams.size > 0;
    this.parts.connection.hidden = !show;
    this.parts.connection.textContent = show ? "Reconnecting…" : "";
  }

  refreshHeader() {
    const run = this.latestRun;
    const { status, cancel } = this.parts;
    if (run) {
      status.hidden = false;
      status.className = `status-chip is-${run.status}`;
      status.textContent = STATUS_LABELS[run.status] || run.status;
    } else {
      status.hidden = true;
    }
    cancel.hidden = !(run && ACTIVE_STATUSES.has(run.status));
    if (cancel.hidden) cancel.disabled = false;
    this.hooks.onChange(this);
  }
}

