// A run's changes card: the files it changed with +/- counts; each opens to its diff,
// highlighted on the server. Revert restores the run's files (the server refuses with a
// reason when a later run or a person changed them since). Long lists render in batches.

import { withId } from "./api.js";
import { el } from "./dom.js";

const FIRST_FILES = 100; // listed at once; the rest on demand, so a huge run does not stall the page
const STATUS_MARKS = { added: "A", modified: "M", deleted: "D" };
const STATUS_WORDS = { added: "added", modified: "modified", deleted: "deleted" };
const FOLDED = {
  lockfile: "Lockfile: its diff is folded away.",
  large: "Large diff: folded away.",
  binary: "Binary file: no text diff.",
};

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

export class ChangesCard {
  /**
   * @param data the `changes` event: {run_id, files, total_files, additions, deletions, commit}
   * @param options {api, changesUrl, revertUrl, filesUrl}: URL templates with "{id}" for the run
   */
  constructor(data, { api, changesUrl, revertUrl, filesUrl }) {
    this.data = data;
    this.api = api;
    this.changesUrl = withId(changesUrl, data.run_id);
    this.revertUrl = withId(revertUrl, data.run_id);
    this.files = Array.isArray(data.files) ? data.files : [];
    this.total = Number(data.total_files) || this.files.length;
    this.shown = 0;
    this.confirming = false;

    this.note = el("p", { class: "changes-note", role: "status", hidden: true });
    this.revertButton = el("button", { type: "button", class: "changes-revert", onclick: () => this.revert() }, "Revert");
    this.list = el("ul", { class: "changes-files" });
    this.more = el("button", { type: "button", class: "changes-more", hidden: true, onclick: () => this.showMore() });
    this.element = el(
      "section",
      { class: "changes-card", dataset: { runId: String(data.run_id) }, "aria-label": "Files changed by this run" },
      el(
        "div",
        { class: "changes-head" },
        el("h3", { class: "changes-title", text: `Changed ${plural(this.total, "file")}` }),
        el("span", { class: "changes-count is-add", text: `+${Number(data.additions) || 0}` }),
        el("span", { class: "changes-count is-del", text: `−${Number(data.deletions) || 0}` }),
        data.commit ? el("code", { class: "changes-commit", title: data.commit, text: String(data.commit).slice(0, 8) }) : null,
        el(
          "span",
          { class: "changes-actions" },
          filesUrl ? el("a", { href: filesUrl, class: "changes-browse" }, "Browse files") : null,
          this.revertButton,
        ),
      ),
      this.note,
      this.list,
      this.more,
    );
    this.showMore();
  }

  /** The next batch of rows: the first FIRST_FILES, then the rest of what the event holds,
   * then (past the event's limit) the full list from the server. */
  async showMore() {
    if (this.shown < this.files.length) {
      const end = this.shown === 0 ? Math.min(FIRST_FILES, this.files.length) : this.files.length;
      const rows = document.createDocumentFragment();
      for (const file of this.files.slice(this.shown, end)) rows.append(this.row(file));
      this.list.append(rows);
      this.shown = end;
    } else if (this.files.length < this.total) {
      this.more.disabled = true;
      try {
        const full = await this.api.get(`${this.changesUrl}?diff=false`);
        this.files = full.files;
        this.total = full.files.length;
      } catch (error) {
        this.say(error.detail, "is-error");
      }
      this.more.disabled = false;
      return this.showMore();
    }
    const left = this.total - this.shown;
    this.more.hidden = left <= 0;
    this.more.textContent = `Show ${plural(left, "more file")}`;
    return undefined;
  }

  row(file) {
    const diff = el("div", { class: "changes-diff" });
    const details = el(
      "details",
      { class: "changes-file", dataset: { path: file.path } },
      el(
        "summary",
        {},
        el("span", {
          class: `changes-status is-${file.status}`,
          title: STATUS_WORDS[file.status] || file.status,
          text: STATUS_MARKS[file.status] || "?",
        }),
        el("span", { class: "changes-path", text: file.path }),
        file.collapsed ? el("span", { class: "changes-folded", text: file.collapsed }) : null,
        el(
          "span",
          { class: "changes-file-counts" },
          el("span", { class: "changes-file-count is-add", text: `+${file.additions}` }),
          el("span", { class: "changes-file-count is-del", text: `−${file.deletions}` }),
        ),
      ),
      diff,
    );
    details.addEventListener("toggle", () => {
      if (details.open && !diff.dataset.state) this.openDiff(file, diff, !file.collapsed);
    });
    return el("li", {}, details);
  }

  /** A file's diff, fetched when first opened; folded files wait for a second click. */
  async openDiff(file, box, load) {
    if (!load) {
      box.dataset.state = "folded";
      const note = el("p", { class: "changes-diff-note", text: FOLDED[file.collapsed] || "Folded." });
      if (file.collapsed !== "binary") {
        note.append(" ", el("button", { type: "button", class: "changes-load", onclick: () => this.openDiff(file, box, true) }, "Show the diff"));
      }
      box.replaceChildren(note);
      return;
    }
    box.dataset.state = "loading";
    box.replaceChildren(el("p", { class: "changes-diff-note", text: "Loading the diff…" }));
    try {
      const body = await this.api.get(`${this.changesUrl}?path=${encodeURIComponent(file.path)}`);
      if (body.reverted_at) this.markReverted(body.reverted_at);
      box.replaceChildren(this.diffView(body));
      box.dataset.state = "loaded";
    } catch (error) {
      box.dataset.state = "";
      box.replaceChildren(el("p", { class: "changes-diff-note is-error", text: error.detail }));
    }
  }

  diffView(body) {
    const code = el("pre", { class: "code-view diff-view" });
    if (body.html) {
      // Rendered by the server (Pygments spans over escaped text); the one HTML this card takes.
      code.innerHTML = body.html;
    } else {
      code.textContent = body.diff || "No textual difference.";
    }
    const parts = [code];
    if (body.truncated) parts.push(el("p", { class: "changes-diff-note", text: "The diff is cut short: it is too large to show whole." }));
    return el("div", {}, ...parts);
  }

  async revert() {
    if (!this.confirming) {
      this.confirming = true;
      this.revertButton.textContent = `Revert ${plural(this.total, "file")}?`;
      this.revertButton.classList.add("is-confirming");
      this.say("Restores the files this run changed to how they were before it. Click again to confirm.");
      return;
    }
    this.revertButton.disabled = true;
    try {
      const body = await this.api.post(this.revertUrl);
      this.markReverted(body.reverted_at);
    } catch (error) {
      if (error.code === "already_reverted") this.markReverted(null);
      else {
        this.resetButton();
        this.say(error.detail, "is-error");
      }
    }
  }

  resetButton() {
    this.confirming = false;
    this.revertButton.disabled = false;
    this.revertButton.textContent = "Revert";
    this.revertButton.classList.remove("is-confirming");
  }

  markReverted() {
    this.element.classList.add("is-reverted");
    this.revertButton.hidden = true;
    this.say("Reverted: these files are back to how they were before this run.", "is-done");
  }

  say(text, kind = "") {
    this.note.className = `changes-note ${kind}`.trim();
    this.note.textContent = text || "";
    this.note.hidden = !text;
  }
}
