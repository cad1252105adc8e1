// Runs: a table of runs, newest first, with filters in the URL (status, workflow and version,
// how the version was chosen, tenant, time range, children shown or not; a deployment's link
// adds its exact window), cursor paging, FAILED rows marked with their error's
// one-line summary (and, once started over, a link to the run that start over made), and a
// batch Retry of the selected runs that reports retried and skipped, and warns of what the
// API says the retried runs meet (an open breaker, joins that fail again at once); first, it
// says which selected runs' tenants are over their run quota, with the fix.

import { api, ApiError, failedAction, query } from "../api.js";
import { currentRoute, setParams } from "../app.js";
import { demoHint } from "../demo.js";
import { confirmAction } from "../dialog.js";
import { announce, fill, focusIfLost, h, widthPercent } from "../dom.js";
import { badge, breakable, count, duration, elapsed, errorSummary, exact, percent, plural, shortId, startedOverWords, time } from "../format.js";
import { Poller } from "../live.js";
import { drawPager, restartPages } from "../pager.js";
import { batchQuotaNote } from "../quota.js";
import { previewBlocks, retryAllButton, skippedRunText, stuckResultBox } from "../retry_all.js";
import { reasonWords } from "../waits.js";
import { warningsBox, withWarnings } from "../warnings.js";

const STATUSES = ["", "RUNNING", "FAILED", "SUCCEEDED", "CANCELLED"];
const RANGES = [
  ["", "any time"],
  ["15m", "last 15 minutes"],
  ["1h", "last hour"],
  ["24h", "last 24 hours"],
  ["7d", "last 7 days"],
];
const RANGE_S = { "15m": 900, "1h": 3600, "24h": 86400, "7d": 604800 };
const ROUTES = [
  ["", "any way"],
  ["serving", "serving version"],
  ["candidate", "a deployment's candidate"],
  ["pinned", "named by the submission"],
  ["system", "the engine's own"],
  ["start_over", "a start over"],
];
const PAGE_SIZE = 50;
const ACTIVE = new Set(["RUNNING"]);
/** The class of the progress bar of a run that ended without succeeding. */
const ENDED_BARS = { FAILED: "failed", CANCELLED: "cancelled" };

function listPath(params, cursor) {
  return `/runs${query({ ...listFilter(params), limit: PAGE_SIZE, cursor })}`;
}

/** The list's filter as `GET /runs` takes it (without paging). */
function listFilter(params) {
  const since = RANGE_S[params.get("since")];
  const after = Number(params.get("after")) || null;
  const fromRange = since ? Math.floor(Date.now() / 1000 - since) : null;
  return {
    status: params.get("status"),
    workflow: params.get("workflow"),
    version: params.get("workflow") ? params.get("version") : null,
    route: params.get("route"),
    tenantId: params.get("tenant"),
    // "false" to include child runs: the API lists root runs when roots is left out.
    roots: params.get("children") === "1" ? "false" : "true",
    createdAfter: after && fromRange ? Math.max(after, fromRange) : after || fromRange,
    createdBefore: Number(params.get("before")) || null,
  };
}

/**
 * How full a run's bar is, in percent: its steps done of all, as its words say. While it runs,
 * a fan-out under way counts as the share of its children that ended (a 100,000-child step
 * would otherwise hold the bar still for an hour). An ended run's bar is its steps alone: a
 * failed or cancelled run's children all ended does not make it done ("2/4 steps · 12/12
 * children" is half full, not full).
 */
export function progressShare(status, progress) {
  const children = progress.children;
  const ended = children ? children.succeeded + children.failed + children.cancelled : 0;
  const underWay = ACTIVE.has(status) && children && ended < children.total ? ended / children.total : 0;
  return Math.min(100, percent(progress.stepsDone + underWay, progress.steps));
}

function progressCell(run) {
  const progress = run.progress;
  if (!progress) return h("td", { class: "muted" }, "—");
  const children = progress.children;
  const ended = children ? children.succeeded + children.failed + children.cancelled : 0;
  const filled = widthPercent(h("span", { class: "mini-fill" }), progressShare(run.status, progress));
  // Coloured as its status badge is (the badge and the words say it too): a failed run's bar
  // red, a cancelled one's grey, never the colour of a run under way or done.
  // A run that SUCCEEDED with children failed or cancelled (its join tolerated them) is
  // marked in the warning colour, as on its page: a green bar would hide them.
  const tolerated = run.status === "SUCCEEDED" && children && children.failed + children.cancelled > 0;
  const bar = h("span", { class: ["mini-bar", tolerated ? "tolerated" : ENDED_BARS[run.status]], "aria-hidden": "true" }, filled);
  const words = [`${progress.stepsDone}/${progress.steps} steps`];
  if (children) {
    words.push(`${count(ended)}/${count(children.total)} children`);
    if (children.failed) words.push(`${count(children.failed)} failed${tolerated ? " (tolerated)" : ""}`);
    // Cancelled children are said on any run (a cancelled run's "500/500 children" read as done).
    if (children.cancelled) words.push(`${count(children.cancelled)} cancelled${tolerated ? " (tolerated)" : ""}`);
  }
  // Why it makes no progress, in the waiting colour: "0/4 steps" for a minute behind an open
  // breaker said nothing (the run's page says the wait in full).
  const waits = run.status === "RUNNING" && progress.waiting ? h("span", { class: "small list-wait" }, `waiting: ${reasonWords(progress.waiting)}`) : null;
  return h("td", { class: "progress-cell", title: tolerated ? words.join(" · ") : null }, bar, h("span", { class: "small" }, words.join(" · ")), waits);
}

/** The run's duration, of its latest run: after a retry (or a resolve, a reprocess) the
 * 24 ms of the rerun, which read as the whole run's time, says so, as the run's page does. */
function durationCell(run) {
  const again = run.startedAt !== null && run.startedAt !== undefined && run.startedAt > run.createdAt + 0.001;
  return h(
    "td",
    { title: again ? `since it ran again at ${new Date(run.startedAt * 1000).toLocaleString()}` : null },
    duration(elapsed(run.startedAt, run.endedAt)),
    again ? h("span", { class: "small muted ran-again" }, " since it ran again") : null,
  );
}

/** A run an operator started over (or a child under a root run started over): a link to the
 * run that start over made, beside its status. A FAILED one is handled (its retry is refused:
 * 409 started_over), not one more to retry. */
function startedOverLink(run) {
  if (!run.startedOverAs) return null;
  // A child can only be under a root started over: start over takes root runs.
  const { label, sentence } = startedOverWords(!run.parentRunId, run.startedOverAs);
  return h(
    "a",
    { class: "started-over", href: `#/runs/${encodeURIComponent(run.startedOverAs)}`, title: `${sentence[0].toUpperCase()}${sentence.slice(1)}: look at that run; this one is not retried` },
    h("span", { "aria-hidden": "true" }, "↻ "),
    `${label} as ${shortId(run.startedOverAs)}`,
  );
}

/** FAILED and nobody started it over: what "Select failed" picks (a batch skips the others). */
function retriable(run) {
  return run.status === "FAILED" && !run.startedOverAs;
}

function row(run, selected, onToggle) {
  const failed = run.status === "FAILED";
  const box = h("input", {
    type: "checkbox",
    "aria-label": `select run ${shortId(run.id)}`,
    checked: selected.has(run.id),
    onchange: (event) => onToggle(run.id, event.target.checked),
  });
  const link = h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono" }, shortId(run.id));
  const workflow = [breakable(run.workflow), h("span", { class: "muted" }, ` v${run.version}`)];
  // A run a deployment routed to its candidate says so, as `runs list` does ("orders v7
  // (candidate)"): in a list of both versions, the candidate's failures are the ones a
  // deployment judges.
  if (run.route === "candidate") workflow.push(h("span", { class: "small muted run-candidate" }, " (candidate)"));
  if (run.parentRunId) workflow.push(h("span", { class: "small muted" }, ` · item ${run.itemIndex}`));
  const cells = [
    h("td", {}, box),
    h("td", { class: "status-cell" }, badge(run.status), startedOverLink(run)),
    h("td", {}, link),
    h("td", {}, workflow),
    h("td", {}, breakable(run.tenantId)),
    // Created, as the list is sorted and filtered: a rerun starts anew (its startedAt), and a
    // "Started" column then disagreed with the "since" filter and the order.
    h("td", {}, time(run.createdAt)),
    durationCell(run),
    progressCell(run),
  ];
  const tr = h("tr", { class: failed ? "row-failed" : null, "data-run": run.id }, cells);
  if (failed && run.error) {
    return [tr, h("tr", { class: "row-failed row-error" }, h("td", {}), h("td", { colspan: "7" }, h("span", { class: "error-line", title: run.error.message || "" }, "✕ ", errorSummary(run.error))))];
  }
  return [tr];
}

function filters(params) {
  const select = (name, label, options) =>
    h(
      "label",
      {},
      label,
      h(
        "select",
        { name, onchange: submit },
        options.map(([value, text]) => h("option", { value, selected: (params.get(name) || "") === value }, text)),
      ),
    );
  const text = (name, label, placeholder) =>
    h("label", {}, label, h("input", { name, value: params.get(name) || "", placeholder, onchange: submit }));
  const form = h(
    "form",
    { class: "filters", role: "search", onsubmit: (event) => (event.preventDefault(), submit()) },
    select("status", "Status", STATUSES.map((v) => [v, v ? v.toLowerCase() : "any status"])),
    text("workflow", "Workflow", "any workflow"),
    h("label", {}, "Version", h("input", { name: "version", value: params.get("version") || "", placeholder: "any", inputmode: "numeric", size: "4", onchange: submit })),
    select("route", "Version chosen by", ROUTES),
    text("tenant", "Tenant", "any tenant"),
    select("since", "Created", RANGES),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "children", checked: params.get("children") === "1", onchange: submit }), "include child runs"),
    h("button", { type: "submit", class: "secondary" }, "Apply"),
  );
  function submit() {
    const data = new FormData(form);
    restartPages("runs");
    const { params: now } = currentRoute();
    setParams({
      status: data.get("status"),
      workflow: data.get("workflow").trim(),
      version: data.get("version").trim(),
      route: data.get("route"),
      after: now.get("after"),
      before: now.get("before"),
      tenant: data.get("tenant").trim(),
      since: data.get("since"),
      children: data.get("children") ? "1" : "",
    });
  }
  return form;
}

/** A deployment's link limits the list to its window: say so, with a way out. */
function windowNote(params) {
  const after = Number(params.get("after")) || null;
  const before = Number(params.get("before")) || null;
  if (!after && !before) return null;
  const span = [after ? `from ${exact(after)}` : null, before ? `until ${exact(before)}` : null].filter(Boolean).join(" ");
  const clear = () => {
    const current = Object.fromEntries(currentRoute().params);
    delete current.after;
    delete current.before;
    delete current.cursor;
    setParams(current);
  };
  return h("p", { class: "window-note" }, `Runs created ${span} (a deployment's window). `, h("button", { type: "button", class: "link", onclick: clear }, "Show any time"));
}

export async function runsPage(main, params) {
  const selected = new Set();
  const live = h("span", { class: "live" });
  const body = h("tbody");
  const result = h("div", { class: "batch-result", role: "status" });
  const retryButton = h("button", { type: "button", class: "primary", disabled: true, onclick: batchRetry }, "Retry selected");
  const pager = h("div", { class: "pager" });
  let page = { items: [], next: null };
  const cursor = params.get("cursor");

  function toggle(id, on) {
    if (on) selected.add(id);
    else selected.delete(id);
    retryButton.disabled = selected.size === 0;
    retryButton.textContent = selected.size ? `Retry selected (${selected.size})` : "Retry selected";
  }

  function draw() {
    if (!page.items.length) {
      fill(body, h("tr", {}, h("td", { colspan: "8", class: "empty" }, "No runs match these filters.")));
    } else {
      fill(body, page.items.map((run) => row(run, selected, toggle)));
    }
    drawPager(pager, "runs", cursor, page, "run");
  }

  async function load() {
    try {
      page = await api(listPath(params, cursor));
    } catch (error) {
      // A workflow filter nothing was published as (a typo): said where the rows go, the
      // filters kept above it to fix it, rather than the whole page replaced by the error.
      if (!(error instanceof ApiError) || error.code !== "workflow_not_found") throw error;
      page = { items: [], next: null };
      selected.clear();
      fill(body, h("tr", {}, h("td", { colspan: "8", class: "empty error-line" }, error.message)));
      return { running: false, signature: error.message };
    }
    for (const id of [...selected]) if (!page.items.some((r) => r.id === id)) selected.delete(id);
    draw();
    return {
      running: page.items.some((r) => ACTIVE.has(r.status)),
      signature: JSON.stringify(page.items.map((r) => [r.id, r.status, r.progress, r.startedOverAs])),
    };
  }

  async function batchRetry() {
    const ids = [...selected];
    // What the batch of these ids would set off, said before the operator confirms, as
    // "Retry all matching" says it: runs that would fail the same way, runs it would skip, a
    // version a deployment rolled back, an open breaker (the API's preview of the same ids).
    let preview;
    try {
      preview = await api("/runs/retry/preview", { method: "POST", body: { ids } });
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, `Could not check the selected runs: ${error.message}`));
      return;
    }
    if (!preview.matching) {
      // Nothing happened: said in the warning colour, not the green of a done action.
      fill(result, h("div", { class: "warning-box nothing-to-retry", role: "status" }, h("p", {}, "Nothing to retry among the selected runs."), ...previewBlocks(preview, "selected")));
      return;
    }
    // Runs whose fan-out failed for their tenant's quota fail again until an admin raises
    // it (the others are retried all the same).
    const quota = await batchQuotaNote(page.items.filter((run) => selected.has(run.id)));
    const noteBlocks = [...(quota || []), ...previewBlocks(preview, "selected")];
    const ok = await confirmAction({
      title: `Retry ${plural(ids.length, "run")}?`,
      text: "Each FAILED run runs its failed steps again; completed steps are kept. Runs that are not FAILED are skipped.",
      noteBlocks: noteBlocks.length ? noteBlocks : null,
      confirm: preview.matching === ids.length ? "Retry" : `Retry ${count(preview.matching)}`,
    });
    if (!ok) return;
    try {
      const answer = await api("/runs/retry", { method: "POST", body: { ids } });
      const skipped = answer.skipped.map((run) => skippedRunText(run));
      const text = `Retried ${answer.retried.length}, skipped ${answer.skipped.length}${skipped.length ? `: ${skipped.join("; ")}` : ""}.`;
      // Each open breaker the retried steps call (once, however many runs call it), then
      // each retried run whose joins fail again at once, a link to its page.
      const warnings = answer.warnings || [];
      const stuck = stuckResultBox(answer.stuck, async () => (await load(), poller.start()));
      fill(result, h("p", { class: "ok-box" }, text), warningsBox(warnings, { breakers: answer.breakers }), stuck);
      announce(withWarnings(text, warnings) + (stuck ? ` ${stuck.textContent}` : ""), warnings.length || stuck ? "warning" : "ok");
      selected.clear();
      toggle(null, false);
      await load();
      poller.start();
      // "Retry selected" is disabled now that nothing is selected: the answer takes the focus.
      focusIfLost(result.firstElementChild);
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, failedAction("Batch retry", error)));
    }
  }

  function selectFailed() {
    for (const run of page.items) if (retriable(run)) toggle(run.id, true);
    draw();
  }

  // Filled once /ui/config answers: the list does not wait for the note.
  const hintSlot = h("div", { class: "demo-hint-slot" });
  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Runs"), live),
    hintSlot,
    filters(params),
    windowNote(params),
    h(
      "div",
      { class: "toolbar" },
      retryButton,
      h("button", { type: "button", class: "secondary", onclick: selectFailed, title: "The FAILED runs on this page that nobody started over (a retry skips those)" }, "Select failed on this page"),
      // A batch retries FAILED runs: with another status the count would differ.
      ["", "FAILED"].includes(params.get("status") || "") ? retryAllButton(() => listFilter(params), result, async () => (await load(), poller.start())) : null,
      result,
    ),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "runs" },
        h("caption", { class: "sr-only" }, "Runs, newest first"),
        h(
          "thead",
          {},
          // The selection column's header is said, not shown (the boxes speak for themselves).
          h("tr", {}, ["", "Status", "Run", "Workflow", "Tenant", "Created", "Duration", "Progress"].map((t) => h("th", { scope: "col" }, t || h("span", { class: "sr-only" }, "Select")))),
        ),
        body,
      ),
    ),
    pager,
  );
  // The first page is where new runs appear: it keeps looking for them while nothing runs.
  const poller = new Poller(load, { intervalMs: 2000, indicator: live, idleIntervalMs: cursor ? null : 5000 });
  demoHint().then((hint) => hint && fill(hintSlot, hint));
  const first = await load();
  poller.follow(first);
  return () => poller.stop();
}
