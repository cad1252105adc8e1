// Destinations: each one's AIMD limit, calls in flight, cap (editable), circuit breakers per
// layer and retry budget, with a chart of the limit and in-flight calls over the last minutes:
// the picture of admission at work. `#/destinations?destination=D&tenant=T` (the link a
// breaker warning or wait gives) opens the page at D, marked, with the Reset of T's breaker
// (without T: the global one's) in focus.

import { api, failedAction } from "../api.js";
import { confirmAction } from "../dialog.js";
import { announce, fill, h } from "../dom.js";
import { count, plural, time } from "../format.js";
import { historyChart } from "../chart.js";
import { Poller } from "../live.js";

function breaker(name, view, reset = null) {
  const icon = { closed: "●", open: "✕", half_open: "◐" }[view.state] || "?";
  const words = [`${name}: ${view.state.replace("_", "-")}`];
  if (view.failures) words.push(plural(view.failures, "failure"));
  if (view.state !== "closed" && view.secondsUntilHalfOpen) words.push(`half-open in ${Math.ceil(view.secondsUntilHalfOpen)} s`);
  return h(
    "li",
    { class: `breaker br-${view.state}` },
    h("span", { "aria-hidden": "true" }, `${icon} `),
    words.join(", "),
    // A closed layer keeps the time it last opened: "closed · opened 53 s ago" read as a
    // contradiction (is it open?), so a closed one says "last opened".
    view.openedAt ? [view.state === "closed" ? " · last opened " : " · opened ", time(view.openedAt), view.openedBy ? h("span", { class: "breaker-cause" }, ` after ${view.openedBy}`) : null] : null,
    view.state !== "closed" && reset ? [" ", reset] : null,
  );
}

/** A Reset button for one layer of `destination`'s breakers, as REST closes them: `tenant`'s
 * layer alone, or (no tenant) the global layer with every tenant's. Admins only: the API
 * refuses others (403), which the result line says. */
function resetButton(destination, tenant, refresh, result) {
  const where = tenant === null ? "the global breaker and every tenant's" : `tenant ${tenant}'s breaker`;
  const reset = async () => {
    const ok = await confirmAction({
      title: `Reset ${where} of ${destination}?`,
      text: "It closes now, on every worker: calls go through again at once instead of waiting for it to half-open. Do it once the destination is fixed.",
      confirm: "Reset the breaker",
    });
    if (!ok) return;
    const query = tenant === null ? "" : `?tenantId=${encodeURIComponent(tenant)}`;
    try {
      const answer = await api(`/destinations/${encodeURIComponent(destination)}/breakers/reset${query}`, { method: "POST" });
      // "the breaker of tenant acme closed", as the CLI says it ("closed tenant default" read
      // as a tenant called "closed"); "1 step … runs now", "3 steps … run now".
      const closed = answer.closed.map((c) => (c.tenantId ? `the breaker of tenant ${c.tenantId}` : `the ${c.layer} breaker`));
      const one = answer.stepsReleased === 1;
      const released = answer.stepsReleased ? ` ${plural(answer.stepsReleased, "step")} waiting behind it ${one ? "was" : "were"} released: ${one ? "it runs" : "they run"} now.` : "";
      const line = (closed.length ? `✓ ${destination}: ${closed.join(", ")} closed.` : `✓ ${destination}: no breaker was open.`) + released;
      const said = h("p", { class: "ok-box", role: "status", tabindex: "-1" }, line);
      fill(result, said);
      announce(line, "ok");
      await refresh(true);
      // A closed layer has no Reset: the button that had the focus is gone, and a keyboard
      // user would be left on <body>. The answer takes the focus instead.
      if (document.activeElement === document.body || !document.activeElement) said.focus();
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, `✕ ${failedAction("Reset", error)}`));
    }
  };
  const label = tenant === null ? `Reset all breakers of ${destination}` : `Reset the breaker of tenant ${tenant} on ${destination}`;
  return h("button", { type: "button", class: "secondary small-button reset-breaker", "aria-label": label, "data-tenant": tenant ?? "", onclick: reset }, "Reset");
}

function capEditor(destination, refresh, result) {
  const id = `cap-${encodeURIComponent(destination.destination)}`;
  const input = h("input", { id, type: "number", min: "1", step: "1", value: String(destination.cap), class: "cap-input", "aria-label": `cap of ${destination.destination}` });
  const rate = h("input", { type: "number", min: "0", step: "any", value: destination.ratePerSecond ?? "", placeholder: "no limit", class: "cap-input", "aria-label": `calls per second of ${destination.destination}` });
  const key = encodeURIComponent(destination.destination);
  const save = async (event) => {
    event.preventDefault();
    const cap = Number(input.value);
    if (!Number.isInteger(cap) || cap < 1) {
      fill(result, h("p", { class: "error-box", role: "alert" }, "✕ A cap is a whole number of calls, 1 or more."));
      return;
    }
    const perSecond = rate.value === "" ? null : Number(rate.value);
    if (perSecond !== null && !(perSecond > 0)) {
      fill(result, h("p", { class: "error-box", role: "alert" }, "✕ Calls per second must be more than 0 (0 would let no call through); leave it empty for no limit."));
      return;
    }
    const ok = await confirmAction({ title: `Cap ${destination.destination}?`, text: `At most ${plural(cap, "call")} in flight${perSecond ? ` and ${perSecond} a second` : ""}, on every worker at once.`, confirm: "Set the cap" });
    if (!ok) return;
    try {
      await api(`/destinations/${key}/caps`, { method: "PUT", body: { maxConcurrency: cap, ratePerSecond: perSecond } });
      const capped = `${destination.destination} capped at ${plural(cap, "call")} in flight${perSecond ? `, ${perSecond}/s` : ""}.`;
      fill(result, h("p", { class: "ok-box", role: "status" }, `✓ ${capped}`));
      announce(capped, "ok");
      await refresh(true);
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, `✕ ${error.message}`));
    }
  };
  const remove = async () => {
    const ok = await confirmAction({ title: `Remove the cap of ${destination.destination}?`, text: "The default cap applies again.", confirm: "Remove the cap" });
    if (!ok) return;
    try {
      await api(`/destinations/${key}/caps`, { method: "DELETE" });
      const back = `${destination.destination} back to the default cap.`;
      fill(result, h("p", { class: "ok-box", role: "status" }, `✓ ${back}`));
      announce(back, "ok");
      await refresh(true);
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, `✕ ${error.message}`));
    }
  };
  return h(
    "form",
    { class: "cap-form", onsubmit: save },
    h("label", { for: id }, "cap "),
    input,
    " ",
    rate,
    h("span", { class: "small muted" }, "/s "),
    h("button", { type: "submit", class: "secondary" }, "Save"),
    destination.capConfigured ? h("button", { type: "button", class: "link", onclick: remove }, "remove") : h("span", { class: "small muted" }, " (default)"),
  );
}

/** The article of `destination` in `list`, or null. */
function articleOf(list, destination) {
  return [...list.querySelectorAll("article.destination")].find((a) => a.dataset.destination === destination) || null;
}

/** The Reset of `tenant`'s layer (null: the global one) in `article`, or null: that layer is
 * closed (a closed layer has no Reset). */
function resetOf(article, tenant) {
  return [...article.querySelectorAll("button.reset-breaker")].find((b) => b.dataset.tenant === (tenant ?? "")) || null;
}

/** What the page says of the destination a link opened it at, above the list. */
function wantedNote(wanted, tenant, article, reset) {
  const layer = tenant ? `tenant ${tenant}'s breaker` : "the global breaker";
  if (!article) return h("p", { class: "warning-box wanted-note" }, `⚠ No destination ${wanted} here: admission has not seen a call to it.`);
  if (!reset) return h("p", { class: "ok-box wanted-note" }, `✓ ${layer} of ${wanted} is not open now: nothing to reset.`);
  return h("p", { class: "wanted-note" }, `${wanted}: the Reset of ${layer} is marked below.`);
}

export async function destinationsPage(main, params = new URLSearchParams()) {
  const live = h("span", { class: "live" });
  const result = h("div");
  const list = h("div", { class: "destinations" });
  const wanted = params.get("destination");
  const wantedTenant = params.get("tenant");
  const editing = () => list.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
  /** The focused element's aria-label inside the list, to put the focus back on its
   * redrawn twin (a keyboard user on a Reset keeps it while the page updates). */
  const focusedLabel = () => (list.contains(document.activeElement) ? document.activeElement.getAttribute("aria-label") : null);

  /** Read and draw the destinations; while a field is being edited the page is left as it
   * is (the poller's look would take the typed value away), unless `changed`: after the
   * operator's own change, whose Enter, confirmed, puts the focus back in the field. The
   * card then kept "Cap 100 (default)" beside "✓ capped at 6" for as long as the focus
   * stayed there. What is typed and not saved, and the focus, survive the redraw. */
  async function refresh(changed = false) {
    const [found, history] = await Promise.all([api("/destinations"), api("/destinations/history")]);
    const seriesOf = new Map(history.series.map((series) => [series.destination, series]));
    if (changed === true || !editing()) {
      const focused = focusedLabel();
      // What an operator typed and has not saved survives the redraw: a Save refused for
      // its value took the focus off the field, and the next look emptied it.
      const typed = new Map([...list.querySelectorAll("input")].filter((i) => i.value !== i.defaultValue).map((i) => [i.getAttribute("aria-label"), i.value]));
      fill(
        list,
        found.items.length
          ? found.items.map((d) =>
              h(
                "article",
                { class: ["destination", d.destination === wanted ? "wanted" : null], "data-destination": d.destination },
                h("h2", { class: "mono", tabindex: "-1" }, d.destination),
                h(
                  "div",
                  { class: "dest-grid" },
                  h(
                    "div",
                    {},
                    h(
                    "dl",
                    { class: "facts" },
                    [
                      ["AIMD limit", `${d.limit.toFixed(1)} (${plural(d.slots, "slot")})`],
                      ["In flight", count(d.inFlight)],
                      ["Cap", `${d.cap}${d.capConfigured ? "" : " (default)"}`],
                      ["Rate", d.ratePerSecond ? `${d.ratePerSecond}/s` : "no limit"],
                      ["Cuts", count(d.cuts)],
                      ["Retry budget", `${d.retryTokens.toFixed(1)} tokens${d.retryAllowed ? "" : " (retries held)"}`],
                    ].map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, value))),
                  ),
                    h(
                      "ul",
                      { class: "breakers" },
                      breaker("global", d.globalBreaker, resetButton(d.destination, null, refresh, result)),
                      Object.entries(d.tenantBreakers).map(([tenant, view]) => breaker(`tenant ${tenant}`, view, resetButton(d.destination, tenant, refresh, result))),
                    ),
                    capEditor(d, refresh, result),
                  ),
                  h("div", {}, historyChart(seriesOf.get(d.destination), history.windowS, Date.now() / 1000, d.cap), h("p", { class: "chart-legend small" }, h("span", { class: "key-limit" }, "— limit"), " ", h("span", { class: "key-inflight" }, "— in flight"), " ", h("span", { class: "key-cap" }, "- - cap"))),
                ),
              ),
            )
          : h("p", { class: "empty" }, "No destination yet: admission lists one once a GATEWAY calls it or a cap is set."),
      );
      const article = wanted ? articleOf(list, wanted) : null;
      if (article) resetOf(article, wantedTenant)?.classList.add("wanted-reset");
      for (const input of list.querySelectorAll("input")) {
        if (typed.has(input.getAttribute("aria-label"))) input.value = typed.get(input.getAttribute("aria-label"));
      }
      if (focused) [...list.querySelectorAll("[aria-label]")].find((e) => e.getAttribute("aria-label") === focused)?.focus();
    }
    return {
      running: true,
      signature: JSON.stringify(found.items.map((d) => [d.destination, d.limit, d.inFlight, d.cap, d.globalBreaker.state, d.tenantBreakers])),
    };
  }

  const note = h("div");
  /** Opened from a breaker's link: scroll to its destination and put the focus on the Reset
   * of its layer (or on the destination's name, when that layer is closed). */
  function showWanted() {
    const article = articleOf(list, wanted);
    const reset = article ? resetOf(article, wantedTenant) : null;
    fill(note, wantedNote(wanted, wantedTenant, article, reset));
    if (!article) return;
    article.scrollIntoView({ block: "start" });
    (reset || article.querySelector("h2")).focus({ preventScroll: true });
  }

  fill(main, h("div", { class: "page-head" }, h("h1", {}, "Destinations"), live), h("p", { class: "muted" }, "Admission per destination: the AIMD limit grows while calls succeed and is cut by overload; breakers stop calls to a failing destination."), note, result, list);
  const poller = new Poller(refresh, { intervalMs: 2000, quietLimit: 30, indicator: live });
  await refresh();
  // After the router's own focus on the page it moved to (it runs once this page is drawn).
  if (wanted) setTimeout(showWanted, 0);
  poller.start();
  return () => poller.stop();
}
