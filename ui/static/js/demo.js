// What a demo server (`serve --demo`, `make demo`) tells the monitor: the demo downstream's
// URL (GET /ui/config; null on any other server), and the first screen's note on what to try,
// which a newcomer who opened the URL the banner printed would otherwise have to guess.

import { api } from "./api.js";
import { h } from "./dom.js";

const HINT_DISMISSED = "schemabridge.demoHintDismissed";

let config = null;

/** The demo downstream's URL under `serve --demo`, else null (asked once per page load). */
export async function demoDownstream() {
  config ??= api("/ui/config").catch(() => ({ demoDownstream: null })); // an older server: no demo
  return (await config).demoDownstream;
}

/** The runs page's "what to try" note on a demo server, until it is dismissed (in this tab,
 * as the monitor keeps everything: nothing of it outlives the tab); null elsewhere. */
export async function demoHint() {
  if (sessionStorage.getItem(HINT_DISMISSED) || !(await demoDownstream())) return null;
  const hint = h(
    "aside",
    { class: "demo-hint", "aria-label": "What to try in this demo" },
    h("p", {}, h("strong", {}, "A demo server: "), "authentication is off, and the examples are published. Things to try:"),
    h(
      "ul",
      {},
      h("li", {}, "Open a ", h("a", { href: "#/runs?status=FAILED" }, "FAILED run"), " to read the HTTP status and the body its downstream answered, then press Retry."),
      h("li", {}, "On a fan-out whose children failed, Reprocess dead letters runs only those children again."),
      h("li", {}, h("a", { href: "#/editor" }, "Editor"), ": write a workflow; the starter document calls the demo downstream."),
    ),
    h("button", { type: "button", class: "secondary", onclick: dismiss }, "Got it"),
  );
  function dismiss() {
    sessionStorage.setItem(HINT_DISMISSED, "1");
    hint.remove();
  }
  return hint;
}
