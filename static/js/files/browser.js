// The file browser page: a folder tree loaded one folder at a time, and a viewer showing a
// file highlighted by the server. URLs come from data-* attributes on #files.

import { makeApi } from "../chat/api.js";
import { el } from "../chat/dom.js";

const root = document.getElementById("files");
const config = root.dataset;
const part = (name) => root.querySelector(`[data-role="${name}"]`);
const api = makeApi("");
const tree = part("tree");
const viewer = { path: part("path"), meta: part("meta"), note: part("note"), code: part("code") };
let current = null;

const ICONS = { dir: "▸", file: "·", symlink: "↪", submodule: "⊞" };

function withPath(url, path) {
  return `${url}?path=${encodeURIComponent(path)}`;
}

export function formatSize(bytes) {
  if (bytes === null || bytes === undefined) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** Fill a list with a folder's entries; folders open in place, files open in the viewer. */
async function fill(list, path) {
  list.replaceChildren(el("li", { class: "tree-note", role: "none", text: "Loading…" }));
  let listing;
  try {
    listing = await api.get(withPath(config.listUrl, path));
  } catch (error) {
    list.replaceChildren(el("li", { class: "tree-note", role: "none", text: error.detail }));
    return;
  }
  const items = listing.entries.map((entry) => item(entry));
  if (listing.truncated) {
    items.push(el("li", { class: "tree-note", role: "none", text: "Only the first 5,000 entries are listed." }));
  }
  list.replaceChildren(...items);
  if (list === tree) part("tree-empty").hidden = listing.entries.length > 0;
}

function item(entry) {
  const isDir = entry.type === "dir";
  const button = el(
    "button",
    { type: "button", class: "tree-item", dataset: { path: entry.path, type: entry.type } },
    el("span", { class: "tree-icon", "aria-hidden": "true", text: ICONS[entry.type] || "·" }),
    el("span", { class: "tree-name", text: entry.name }),
    entry.type === "file" ? el("span", { class: "tree-size", text: formatSize(entry.size) }) : null,
  );
  const node = el("li", { role: "treeitem", "aria-expanded": isDir ? "false" : null }, button);
  if (isDir) {
    const children = el("ul", { role: "group", hidden: true });
    node.append(children);
    button.addEventListener("click", () => toggle(node, children, entry.path));
  } else if (entry.type !== "submodule") {
    button.addEventListener("click", () => open(entry.path, button));
  }
  return node;
}

async function toggle(node, children, path) {
  const opening = node.getAttribute("aria-expanded") !== "true";
  node.setAttribute("aria-expanded", String(opening));
  node.querySelector(".tree-icon").textContent = opening ? "▾" : "▸";
  children.hidden = !opening;
  if (opening && !children.dataset.loaded) {
    children.dataset.loaded = "1";
    await fill(children, path);
  }
}

function say(text, kind = "") {
  viewer.note.className = `files-note ${kind}`.trim();
  viewer.note.textContent = text;
  viewer.note.hidden = !text;
}

/** Show one file; the server sends its lines highlighted (escaped text in Pygments spans). */
async function open(path, button = null) {
  current?.removeAttribute("aria-current");
  current = button;
  button?.setAttribute("aria-current", "true");
  viewer.path.textContent = path;
  viewer.meta.textContent = "";
  say("Loading…");
  viewer.code.hidden = true;
  let file;
  try {
    file = await api.get(withPath(config.contentUrl, path));
  } catch (error) {
    say(error.status === 404 ? "No such file here." : error.detail, "is-error");
    return;
  }
  const url = new URL(window.location.href);
  url.searchParams.set("path", file.path);
  window.history.replaceState({}, "", url);
  viewer.meta.textContent = [file.language, formatSize(file.size)].filter(Boolean).join(" · ");
  if (file.binary) {
    say(`Binary file (${formatSize(file.size)}): not shown.`);
    return;
  }
  say(file.truncated ? `Only the first 1 MB of ${formatSize(file.size)} is shown.` : "");
  // Rendered by the server: Pygments spans around escaped text, nothing a file can inject.
  viewer.code.innerHTML = file.html;
  viewer.code.hidden = false;
}

/** Open the folders on the way to ``path`` (from ?path=), then the file itself. */
async function reveal(path) {
  const parts = path.split("/").filter(Boolean);
  let list = tree;
  for (const [index] of parts.slice(0, -1).entries()) {
    const folder = parts.slice(0, index + 1).join("/");
    const button = list.querySelector(`:scope > li > .tree-item[data-path="${CSS.escape(folder)}"]`);
    if (!button) break;
    const node = button.parentElement;
    const children = node.querySelector(":scope > ul");
    if (node.getAttribute("aria-expanded") !== "true") await toggle(node, children, folder);
    list = children;
  }
  const button = list.querySelector(`:scope > li > .tree-item[data-path="${CSS.escape(parts.join("/"))}"]`);
  await open(parts.join("/"), button);
}

await fill(tree, "");
if (config.path) await reveal(config.path);
