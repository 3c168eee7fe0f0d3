// What a closed or answered card says instead of its inputs. Claude's and users' words: text nodes only.

import { el } from "./dom.js";

/** Why a question closed without an answer (ask_user_expired's reason): heading and detail. */
export const CLOSED_REASONS = {
  timeout: { stateClass: "is-expired", heading: "Question timed out", detail: "Claude was told to continue without an answer." },
  cancelled: { stateClass: "is-cancelled", heading: "Question cancelled (the run ended)", detail: "" },
  superseded: { stateClass: "is-superseded", heading: "Replaced by a newer question", detail: "" },
};

export const UNKNOWN_REASON = { stateClass: "is-expired", heading: "Question closed", detail: "" };

/** "You" for the signed-in user (or an unnamed answer), else the user's name. */
export function answeredBy(data, username) {
  return data.answered_by && data.answered_by !== username ? data.answered_by : "You";
}

/**
 * "{heading}: answer" for one question, or the heading over a list of question → answer.
 * `kind` names the classes: qcard-{kind} and qcard-{kind}-list.
 */
export function answerLines(heading, questions, answers, kind) {
  if (questions.length <= 1) {
    const asked = questions[0] ? answers[questions[0].question] : undefined;
    const text = asked ?? Object.values(answers)[0] ?? "";
    return [el("p", { class: `qcard-${kind}` }, `${heading}: `, el("strong", { text: String(text) }))];
  }
  const list = el("ul", { class: `qcard-${kind}-list` });
  for (const q of questions) {
    list.append(
      el("li", {}, el("span", { class: "qcard-answer-q", text: `${q.question} ` }), el("strong", { text: String(answers[q.question] ?? "") })),
    );
  }
  return [el("p", { class: `qcard-${kind}`, text: `${heading}:` }), list];
}
