// What the API warns about after an action that was done all the same: a retry whose steps
// meet an open circuit breaker or whose joins fail again at once, a reprocess into an open
// breaker, a version published that does not serve new runs yet. Shown as a warning (an icon
// and the word, not colour alone), each sentence as text with the commands it quotes in
// `backticks` as code.

import { h } from "./dom.js";

/** `text` as nodes: each part the API quotes in backticks (a command, a request) a <code>,
 * the rest text. An unpaired backtick stays as it is. */
export function withCode(text) {
  const parts = String(text ?? "").split("`");
  if (parts.length % 2 === 0) parts.splice(-2, 2, `${parts.at(-2)}\`${parts.at(-1)}`);
  return parts.map((part, index) => (index % 2 ? h("code", {}, part) : part));
}

/** A warning box saying each of `warnings` (sentences), or null when there is none: one
 * after "⚠ Warning:", several as a list. `className` is added to the box's. */
export function warningsBox(warnings, { className = null } = {}) {
  const said = (warnings || []).filter(Boolean);
  if (!said.length) return null;
  const classes = ["warning-box", "action-warnings", className];
  if (said.length === 1) {
    return h("p", { class: classes }, h("strong", {}, "⚠ Warning: "), withCode(said[0]));
  }
  return h(
    "div",
    { class: classes },
    h("p", {}, h("strong", {}, `⚠ ${said.length} warnings:`)),
    h("ul", {}, said.map((warning) => h("li", {}, withCode(warning)))),
  );
}

/** `line` and the warnings after it as one sentence for the page's status line. */
export function withWarnings(line, warnings) {
  const said = (warnings || []).filter(Boolean);
  return said.length ? `${line} Warning: ${said.join(" ")}` : line;
}
