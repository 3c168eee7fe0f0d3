// The chat workspace page: wires the sidebar, the open conversation and the prompt box.
// URLs come from data-* attributes the template renders on #chat.

import { makeApi } from "./api.js";
import { Attention, askNotificationPermissionOnce } from "./attention.js";
import { ClickChannel } from "./clicks.js";
import { ConversationView } from "./conversation.js";
import { Sidebar } from "./sidebar.js";

const root = document.getElementById("chat");
const config = root.dataset;
const part = (name) => root.querySelector(`[data-role="${name}"]`);

const api = makeApi(config.csrfCookie);
const clicks = new ClickChannel(config.clicksUrl, api, {
  answer: config.submitAnswerUrl,
  decision: config.submitDecisionUrl,
});
clicks.open();
const attention = new Attention();
const prompt = part("prompt");
const composer = part("composer");
const composerError = part("composer-error");
const sendButton = part("send");
const filesLink = part("files");
let sending = false;

// The prompt box grows with its text, up to the height its stylesheet allows.
function fitPrompt() {
  prompt.style.height = "auto";
  prompt.style.height = `${prompt.scrollHeight + 2}px`;
}
prompt.addEventListener("input", fitPrompt);

const sidebar = new Sidebar({
  list: part("conversations"),
  empty: part("conversations-empty"),
  url: config.conversationsUrl,
  api,
  onSelect: (id) => {
    // On a phone, picking a conversation folds the list to show it.
    part("list-toggle").setAttribute("aria-expanded", "false");
    root.classList.remove("is-list-open");
    navigate(id);
  },
});

const view = new ConversationView({
  parts: {
    stream: part("stream"),
    welcome: part("welcome"),
    title: part("title"),
    status: part("status"),
    cancel: part("cancel"),
    connection: part("connection"),
    prompt,
  },
  config,
  api,
  clicks,
  attention,
  hooks: {
    onChange: () => {
      updateComposer();
      sidebar.showStatus(view.id, view.latestRun?.status ?? null);
      filesLink.href = view.filesUrl();
    },
    onRunEnded: () => {
      sidebar.refresh();
      if (!prompt.disabled) prompt.focus({ preventScroll: true });
    },
  },
});

// The composer stays usable while Claude works: a message then goes into the running turn.
function updateComposer() {
  prompt.disabled = sending;
  sendButton.disabled = sending;
  prompt.placeholder = view.busy
    ? "Claude is working — your message goes into the running turn"
    : "Message Claude — Enter to send, Shift+Enter for a new line";
}

/** Into the running turn; once the run has ended (410), as the conversation's next prompt. */
async function sendWhileBusy(text) {
  try {
    await view.talk.sendMessage(text);
    return null;
  } catch (error) {
    if (error.status !== 410) throw error;
    return view.start(text);
  }
}

function showComposerError(text) {
  composerError.textContent = text;
  composerError.hidden = !text;
}

function conversationFromUrl() {
  const value = new URLSearchParams(window.location.search).get("c");
  return value && /^\d+$/.test(value) ? Number(value) : null;
}

function setUrl(conversationId, replace = false) {
  const url = new URL(window.location.href);
  if (conversationId) url.searchParams.set("c", String(conversationId));
  else url.searchParams.delete("c");
  if (url.href === window.location.href) return;
  window.history[replace ? "replaceState" : "pushState"]({}, "", url);
}

async function show(conversationId) {
  showComposerError("");
  sidebar.highlight(conversationId);
  if (!conversationId) {
    view.clear();
    return;
  }
  try {
    await view.open(conversationId);
  } catch (error) {
    view.clear();
    setUrl(null, true);
    sidebar.highlight(null);
    showComposerError(error.status === 404 ? "That conversation does not exist or is not yours." : error.detail);
  }
}

function navigate(conversationId) {
  setUrl(conversationId);
  show(conversationId);
}

async function send() {
  const text = prompt.value.trim();
  if (!text || sending) return;
  askNotificationPermissionOnce();
  sending = true;
  updateComposer();
  showComposerError("");
  try {
    const started = view.busy ? await sendWhileBusy(text) : await view.start(text);
    prompt.value = "";
    fitPrompt();
    // The user may have opened another conversation while the prompt was on its way.
    if (started && view.id === started.conversation_id) {
      setUrl(started.conversation_id, true);
      sidebar.highlight(started.conversation_id);
    }
    sidebar.refresh();
  } catch (error) {
    showComposerError(error.detail || String(error));
  } finally {
    sending = false;
    updateComposer();
  }
}

composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});

part("new-conversation").addEventListener("click", () => {
  navigate(null);
  prompt.focus();
});

// On a phone the conversation list folds away under its button.
const listToggle = part("list-toggle");
listToggle.addEventListener("click", () => {
  const open = listToggle.getAttribute("aria-expanded") !== "true";
  listToggle.setAttribute("aria-expanded", String(open));
  root.classList.toggle("is-list-open", open);
});

// The offline demo's trigger words: a click puts an example prompt in the box.
for (const button of root.querySelectorAll('[data-role="demo-trigger"]')) {
  button.addEventListener("click", () => {
    prompt.value = button.dataset.prompt;
    fitPrompt();
    prompt.focus();
  });
}

window.addEventListener("popstate", () => show(conversationFromUrl()));

sidebar.start();
show(conversationFromUrl()).then(() => {
  if (!prompt.disabled) prompt.focus({ preventScroll: true });
});
