// The inputs of one question on a card, and reading the user's answer back from them.
// Question text, headers, labels and descriptions come from Claude: text nodes only.

import { el } from "./dom.js";

/**
 * One question as a fieldset: radio buttons (single choice) or checkboxes (multi-select)
 * with an "Other" answer, or a textarea when the question has no options.
 */
export class QuestionFields {
  constructor(spec, { name, index }) {
    this.spec = spec;
    this.options = Array.isArray(spec.options) ? spec.options : [];
    this.multi = Boolean(spec.multiSelect) && this.options.length > 0;
    this.inputs = [];
    this.otherToggle = null;
    this.otherText = null;
    this.freeText = null;

    const legend = el(
      "legend",
      { class: "qcard-legend" },
      spec.header ? el("span", { class: "qcard-chip", text: spec.header }) : null,
      el("span", { class: "qcard-question", text: spec.question || "" }),
    );
    this.element = el("fieldset", { class: "qcard-q", dataset: { index: String(index) } }, legend);
    if (this.options.length) {
      this.element.append(el("p", { class: "qcard-hint-line", text: this.multi ? "Choose one or more." : "Choose one." }));
      this.buildOptions(name);
    } else {
      this.freeText = el("textarea", {
        class: "qcard-free",
        rows: 3,
        name,
        "aria-label": spec.question || "Your answer",
        placeholder: "Type your answer — Enter to send, Shift+Enter for a new line",
      });
      this.element.append(this.freeText);
    }
  }

  buildOptions(name) {
    const type = this.multi ? "checkbox" : "radio";
    const list = el("div", { class: "qcard-options", role: this.multi ? "group" : "radiogroup" });
    this.options.forEach((option, i) => {
      const input = el("input", { type, name, value: String(i) });
      this.inputs.push(input);
      list.append(
        el(
          "label",
          { class: "qcard-option" },
          input,
          i < 9 ? el("kbd", { class: "qcard-key", text: String(i + 1), "aria-hidden": "true" }) : el("span", { class: "qcard-key" }),
          el(
            "span",
            { class: "qcard-option-body" },
            el("span", { class: "qcard-label", text: option.label || "" }),
            option.description ? el("span", { class: "qcard-desc", text: option.description }) : null,
          ),
        ),
      );
    });
    this.otherToggle = el("input", { type, name, value: "other", "aria-label": "Other" });
    this.otherText = el("input", { type: "text", class: "qcard-other-text", placeholder: "Other — type your own answer", "aria-label": "Other answer" });
    // Typing an answer chooses "Other"; clearing it un-chooses it.
    this.otherText.addEventListener("input", () => {
      this.otherToggle.checked = this.otherText.value.trim() !== "";
    });
    this.otherToggle.addEventListener("change", () => {
      if (this.otherToggle.checked) this.otherText.focus();
    });
    list.append(el("label", { class: "qcard-option qcard-other" }, this.otherToggle, el("span", { class: "qcard-key" }), this.otherText));
    this.element.append(list);
  }

  /** {question, selected: [indices], other: "text"} as the submit endpoint takes it. */
  value() {
    if (this.freeText) return { question: this.spec.question, selected: [], other: this.freeText.value.trim() };
    const selected = this.inputs.filter((input) => input.checked).map((input) => Number(input.value));
    const other = this.otherToggle.checked ? this.otherText.value.trim() : "";
    return { question: this.spec.question, selected, other };
  }

  answered() {
    const { selected, other } = this.value();
    return selected.length > 0 || other !== "";
  }

  contains(node) {
    return this.element.contains(node);
  }

  /** Keyboard shortcut: pick option n (0-based). True when it did something. */
  pick(n) {
    const input = this.inputs[n];
    if (!input || input.disabled) return false;
    input.checked = this.multi ? !input.checked : true;
    input.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  focus() {
    const target = this.freeText || this.inputs.find((input) => input.checked) || this.inputs[0];
    if (target) target.focus({ preventScroll: true });
  }

  setMissing(missing) {
    this.element.classList.toggle("is-missing", missing);
  }
}
