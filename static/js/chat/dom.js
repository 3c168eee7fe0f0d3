// Small DOM and formatting helpers. Everything a user or Claude wrote goes in as text.

/**
 * Build an element: el("p", {class: "x", dataset: {id: 1}}, "text", child).
 * Strings become text nodes, never HTML; null/false children are skipped.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  append(node, ...children);
  return node;
}

export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function formatCost(usd) {
  if (usd === null || usd === undefined || usd === "") return "";
  const value = Number(usd);
  if (!Number.isFinite(value)) return "";
  return value < 0.01 ? `$${value.toFixed(4)}` : `$${value.toFixed(2)}`;
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return "";
  const seconds = Number(ms) / 1000;
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes} min ${Math.round(seconds % 60)} s`;
}

/** "4:05" for a countdown of 245 seconds. */
export function formatCountdown(seconds) {
  const whole = Math.max(0, Math.ceil(seconds));
  const minutes = Math.floor(whole / 60);
  return `${minutes}:${String(whole % 60).padStart(2, "0")}`;
}

export function scrollToEnd(container) {
  container.scrollTop = container.scrollHeight;
}

/** True when the user is near the bottom, so new output may scroll the view. */
export function isNearEnd(container, slack = 120) {
  return container.scrollHeight - container.scrollTop - container.clientHeight < slack;
}

/** True for elements where typing digits or Enter means text, not a shortcut. */
export function isTextEntry(node) {
  if (!(node instanceof HTMLElement)) return false;
  if (node instanceof HTMLTextAreaElement || node.isContentEditable) return true;
  return node instanceof HTMLInputElement && !["radio", "checkbox", "button", "submit"].includes(node.type);
}
