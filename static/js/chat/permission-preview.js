// What a tool call would do, as the server previewed it: a command, a diff, a new file, a URL,
// MCP arguments or plain JSON. All of it comes from Claude's tool input: text nodes only.

import { el } from "./dom.js";

// Past either limit a block shows its beginning and a "Show all" button.
export const PREVIEW_MAX_LINES = 40;
export const PREVIEW_MAX_CHARS = 4000;

const isText = (value) => typeof value === "string";

/** Pretty JSON of anything the event carried; never throws on odd values. */
export function prettyJson(value) {
  try {
    return JSON.stringify(value ?? {}, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** The first lines of `lines` within both limits; the last one cut short if it alone is too long. */
function firstPart(lines) {
  const kept = [];
  let chars = 0;
  for (const line of lines) {
    if (kept.length === PREVIEW_MAX_LINES) break;
    if (chars + line.length > PREVIEW_MAX_CHARS) {
      kept.push(line.slice(0, Math.max(0, PREVIEW_MAX_CHARS - chars)));
      return { kept, truncated: true };
    }
    kept.push(line);
    chars += line.length + 1;
  }
  return { kept, truncated: kept.length < lines.length };
}

/**
 * A monospace block of `text`, shortened when large with a button that shows all of it.
 * `lineClass(line)` gives a line its own class (the diff's colours); without it the block is plain text.
 */
function block(text, { className, lineClass = null, label }) {
  const lines = text.split("\n");
  const pre = el("pre", { class: `pcard-pre ${className}`, "aria-label": label });
  const fill = (shown) => {
    if (!lineClass) {
      pre.textContent = shown.join("\n");
      return;
    }
    pre.replaceChildren(...shown.map((line) => el("span", { class: `pcard-line ${lineClass(line)}`.trim(), text: line })));
  };
  const { kept, truncated } = firstPart(lines);
  fill(kept);
  if (!truncated) return [pre];
  pre.classList.add("is-truncated");
  const what = lines.length > kept.length ? `${lines.length} lines` : `${text.length.toLocaleString()} characters`;
  const more = el("button", { type: "button", class: "pcard-more", text: `Show all ${what}` });
  more.addEventListener("click", () => {
    fill(lines);
    pre.classList.remove("is-truncated");
    pre.classList.add("is-expanded");
    more.remove();
  });
  return [pre, more];
}

function diffLineClass(line) {
  if (line.startsWith("+++") || line.startsWith("---")) return "is-meta";
  if (line.startsWith("+")) return "is-add";
  if (line.startsWith("-")) return "is-del";
  if (line.startsWith("@@")) return "is-hunk";
  return "";
}

function count(value, lines, sign) {
  const number = Number(value);
  if (value !== null && value !== undefined && Number.isFinite(number)) return number;
  return lines.filter((line) => diffLineClass(line) === (sign === "+" ? "is-add" : "is-del")).length;
}

function fileLine(path, ...extra) {
  return el("div", { class: "pcard-file" }, el("code", { class: "pcard-path", text: path }), ...extra);
}

function caption(text) {
  return el("div", { class: "pcard-caption", text });
}

/** Each renderer answers null when the preview lacks what it needs: the JSON fallback shows instead. */
const RENDERERS = {
  bash(preview) {
    if (!isText(preview.command)) return null;
    return [
      isText(preview.description) && preview.description ? el("p", { class: "pcard-description", text: preview.description }) : null,
      ...block(preview.command, { className: "pcard-command", label: "Command" }),
    ];
  },
  diff(preview) {
    if (!isText(preview.path) || !isText(preview.diff)) return null;
    const lines = preview.diff.split("\n");
    return [
      fileLine(
        preview.path,
        el("span", { class: "pcard-additions", text: `+${count(preview.additions, lines, "+")}` }),
        el("span", { class: "pcard-deletions", text: `−${count(preview.deletions, lines, "-")}` }),
      ),
      ...block(preview.diff, { className: "pcard-diff", lineClass: diffLineClass, label: "Changes" }),
    ];
  },
  write(preview) {
    if (!isText(preview.path) || !isText(preview.content)) return null;
    return [fileLine(preview.path, el("span", { class: "pcard-new-file", text: "new file" })), ...block(preview.content, { className: "pcard-content", label: "Content" })];
  },
  url(preview) {
    if (!isText(preview.url)) return null;
    const prompt = isText(preview.prompt) && preview.prompt ? [caption("Prompt"), ...block(preview.prompt, { className: "pcard-prompt", label: "Prompt" })] : [];
    return [el("p", { class: "pcard-url" }, el("code", { text: preview.url })), ...prompt];
  },
  mcp(preview) {
    if (!isText(preview.server) || !isText(preview.tool)) return null;
    return [
      el(
        "p",
        { class: "pcard-mcp" },
        "Server ",
        el("code", { class: "pcard-mcp-server", text: preview.server }),
        " · tool ",
        el("code", { class: "pcard-mcp-tool", text: preview.tool }),
      ),
      caption("Arguments"),
      ...block(prettyJson(preview.arguments), { className: "pcard-json", label: "Arguments" }),
    ];
  },
  json(preview) {
    if (!isText(preview.json)) return null;
    return block(preview.json, { className: "pcard-json", label: "Input" });
  },
};

/**
 * The element that shows `preview`, with `dataset.kind` saying how ("bash", "diff"…);
 * an unknown or unusable preview shows pretty JSON of the tool's `input` (kind "json").
 */
export function renderPreview(preview, input) {
  const type = preview && typeof preview === "object" && !Array.isArray(preview) ? preview.type : undefined;
  const nodes = Object.hasOwn(RENDERERS, type) ? RENDERERS[type](preview) : null;
  if (nodes) return el("div", { class: `pcard-preview is-${type}`, dataset: { kind: type } }, ...nodes);
  const fallback = block(prettyJson(input), { className: "pcard-json", label: "Input" });
  return el("div", { class: "pcard-preview is-fallback", dataset: { kind: "json" } }, ...fallback);
}
