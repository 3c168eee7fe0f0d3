// A file edit in the stream shows what it changes: an Edit's old and new text as a diff.
// Claude's words: text nodes only.

import { el } from "./dom.js";

const EDIT_TOOLS = new Set(["Edit", "MultiEdit"]);

function lines(text) {
  return typeof text === "string" ? text.split("\n") : [];
}

/** Lines shared at both ends are context; what lies between is removed, then added. */
function diffLines(before, after) {
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) head += 1;
  let tail = 0;
  while (
    tail < before.length - head &&
    tail < after.length - head &&
    before[before.length - 1 - tail] === after[after.length - 1 - tail]
  ) {
    tail += 1;
  }
  return [
    ...before.slice(0, head).map((text) => ["ctx", text]),
    ...before.slice(head, before.length - tail).map((text) => ["del", text]),
    ...after.slice(head, after.length - tail).map((text) => ["add", text]),
    ...before.slice(before.length - tail).map((text) => ["ctx", text]),
  ];
}

const MARKS = { ctx: "  ", del: "- ", add: "+ " };

/** The diff block of an Edit or MultiEdit call, or null for any other tool. */
export function editDiff(name, input) {
  if (!EDIT_TOOLS.has(name) || !input || typeof input !== "object") return null;
  const edits = name === "MultiEdit" && Array.isArray(input.edits) ? input.edits : [input];
  const pre = el("pre", { class: "tool-pre tool-diff" });
  let added = 0;
  let removed = 0;
  for (const edit of edits) {
    for (const [kind, text] of diffLines(lines(edit?.old_string), lines(edit?.new_string))) {
      if (kind === "add") added += 1;
      if (kind === "del") removed += 1;
      pre.append(el("span", { class: `diff-line is-${kind}` }, MARKS[kind] + text));
    }
  }
  return el(
    "div",
    { class: "tool-diff-box" },
    el(
      "div",
      { class: "tool-section-title" },
      "Diff ",
      el("span", { class: "diff-path", text: typeof input.file_path === "string" ? input.file_path : "" }),
      " ",
      el("span", { class: "diff-count is-add", text: `+${added}` }),
      " ",
      el("span", { class: "diff-count is-del", text: `−${removed}` }),
    ),
    pre,
  );
}
