// What the API warns about after an action that was done all the same: a retry whose steps
// meet an open circuit breaker or whose joins fail again at once, a reprocess into an open
// breaker, a version published that does not serve new runs yet. Shown as a warning (an icon
// and the word, not colour alone), each sentence as text with the commands it quotes in
// `backticks` as code. An open breaker's sentence names the CLI command that closes it; the
// answer's `breakers` give the same breakers as data, and each gets a link to its Reset on the
// Destinations page, so the operator can act right here (an admin: the page answers a tenant
// key 403, so a tenant key reads the sentence without the link).

import { h } from "./dom.js";
import { opensAdminPages, whoIsKnown } from "./who.js";

/** Where a breaker's Reset is: the Destinations page, opened at `breaker.destination` with
 * the Reset of its layer (`tenantId`'s, or none: the global one) in focus. */
export function destinationHref(breaker) {
  const query = new URLSearchParams({ destination: breaker.destination });
  if (breaker.tenantId) query.set("tenant", breaker.tenantId);
  return `#/destinations?${query}`;
}

/** A link to the Reset of `breaker` (the API's `BreakerRef`: destination, tenantId), or null
 * without one or for a key the Destinations page refuses (`opensAdminPages`). Drawn after the
 * page waited for `whoIsIt` or after a click, so the key's role is known by then. */
export function resetLink(breaker) {
  if (!breaker || !breaker.destination || !opensAdminPages(whoIsKnown())) return null;
  const layer = breaker.tenantId ? `tenant ${breaker.tenantId}'s breaker` : "the global breaker";
  return h(
    "a",
    {
      href: destinationHref(breaker),
      class: "reset-link",
      "data-destination": breaker.destination,
      "aria-label": `Reset ${layer} of ${breaker.destination} on the Destinations page`,
    },
    "Reset it on the Destinations page →",
  );
}

/** A warning's nodes: its text (with code), then the Reset link of the breaker among
 * `breakers` whose sentence it is (the API gives both, so no text is parsed here). The
 * answers' warning boxes and the previews in the action dialogs say them alike. */
export function warningNodes(warning, breakers) {
  const breaker = (breakers || []).find((b) => b.message === warning);
  return breaker ? [withCode(warning), " ", resetLink(breaker)] : withCode(warning);
}

/** `text` as nodes: each part the API quotes in backticks (a command, a request) a <code>,
 * the rest text. An unpaired backtick stays as it is. */
export function withCode(text) {
  const parts = String(text ?? "").split("`");
  if (parts.length % 2 === 0) parts.splice(-2, 2, `${parts.at(-2)}\`${parts.at(-1)}`);
  return parts.map((part, index) => (index % 2 ? h("code", {}, part) : part));
}

/** A warning box saying each of `warnings` (sentences), or null when there is none: one
 * after "⚠ Warning:", several as a list. `className` is added to the box's; `breakers` (the
 * answer's) add a Reset link to the warnings that are theirs. */
export function warningsBox(warnings, { className = null, breakers = [] } = {}) {
  const given = (warnings || []).filter(Boolean);
  if (!given.length) return null;
  const classes = ["warning-box", "action-warnings", className];
  if (given.length === 1) {
    return h("p", { class: classes }, h("strong", {}, "⚠ Warning: "), warningNodes(given[0], breakers));
  }
  return h(
    "div",
    { class: classes },
    h("p", {}, h("strong", {}, `⚠ ${given.length} warnings:`)),
    h("ul", {}, given.map((warning) => h("li", {}, warningNodes(warning, breakers)))),
  );
}

/** `line` and the warnings after it as one sentence for the page's status line. */
export function withWarnings(line, warnings) {
  const said = (warnings || []).filter(Boolean);
  return said.length ? `${line} Warning: ${said.join(" ")}` : line;
}
