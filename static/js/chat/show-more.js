// Long output folds to a few screens' worth behind "Show more", so a long reply or tool
// result does not push everything else out of sight.

import { el } from "./dom.js";

const FOLD_PX = 480;
let counter = 0;

/** Fold `content` (already in the page) when it is taller than FOLD_PX; idempotent. */
export function foldIfLong(content) {
  if (content.dataset.folded !== undefined || content.scrollHeight <= FOLD_PX * 1.25) return;
  counter += 1;
  content.id ||= `fold-${counter}`;
  content.dataset.folded = "";
  content.classList.add("is-folded");
  const button = el("button", {
    type: "button",
    class: "show-more",
    "aria-expanded": "false",
    "aria-controls": content.id,
    text: "Show more",
  });
  button.addEventListener("click", () => {
    const folded = content.classList.toggle("is-folded");
    button.setAttribute("aria-expanded", String(!folded));
    button.textContent = folded ? "Show more" : "Show less";
  });
  content.after(button);
}
