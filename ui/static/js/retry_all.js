// "Retry all matching": a batch retry of every FAILED run the runs list's filter matches, not
// only the page shown (1,790 failed children are 36 pages of 50). The dialog says how many
// first, as the API counts them for that filter (`POST /runs/retry/preview`: one count in the
// database, not a page of ids at a time), leading with the runs that would fail the same way
// at once (the workflow or their input caused their failure: `fixFirst`, as a run's own
// Retry dialog leads with fixing the workflow), then the runs whose joins would fail again at
// once (their children still FAILED: `stuck`, reprocess them instead), then the breakers the
// retried steps would meet; the answer's retried and skipped follow.

import { api, failedAction, redrawAfter } from "./api.js";
import { confirmAction } from "./dialog.js";
import { announce, fill, h } from "./dom.js";
import { count, plural, shortId } from "./format.js";
import { warningNodes, warningsBox, withCode, withWarnings } from "./warnings.js";

/** The most runs one batch retry takes (the API's `limit` maximum). */
const MAX_BATCH = 10_000;

/** The batch body's filter from the list's query (`roots` as the list sends it): every field
 * the list filters on, so the batch takes the runs the list shows (a deployment's exposure
 * link's `route` and window too). */
export function batchFilter(filter) {
  const body = { status: "FAILED" };
  for (const name of ["workflow", "version", "route", "tenantId", "parent", "createdAfter", "createdBefore"]) {
    if (filter[name] !== null && filter[name] !== undefined && filter[name] !== "") body[name] = name === "version" ? Number(filter[name]) : filter[name];
  }
  if (filter.roots !== undefined && filter.roots !== null) body.roots = filter.roots === "true" || filter.roots === true;
  return body;
}

/** The API's sentence as the page says it: without the run ids it ends with (`; runs: a, b
 * and 3 more`: the links below it name them) and without the CLI's commands in parentheses
 * (the button the sentence names, or the editor, does it here). */
function forThePage(message) {
  return message.replace(/; runs?: [0-9a-f-]+(?:, [0-9a-f-]+)*(?: and [\d,]+ more)?$/, "").replace(/ \(`schemabridge [^`]*`(?:, then `schemabridge [^`]*`)*\)/g, "");
}

/** `text` ending as a sentence does: the API's sentences, once `forThePage` has cut the run
 * ids off their end, end without a full stop, and the next block would read on from them. */
function sentence(text) {
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

/** The preview's runs that would fail the same way at once, said first: the API's sentence
 * (which leads its `warnings`), then each kind's newest runs as links to open them. */
function fixFirstBlocks(preview) {
  const groups = preview.fixFirst || [];
  if (!groups.length || !(preview.warnings || []).length) return [];
  const runs = (group) => [`${group.kind}: `, runLinks(group.runIds, group.count)];
  return [
    h("p", { class: "fix-first" }, h("strong", {}, "⚠ Fix the workflow first: "), withCode(sentence(forThePage(preview.warnings[0])))),
    h("ul", { class: "fix-first-runs" }, groups.map((group) => h("li", {}, runs(group)))),
  ];
}

/** The links of `runIds` (the newest of `total` runs): "1a2b3c4d, 5e6f7a8b and 3 more". */
function runLinks(runIds, total) {
  return [
    runIds.map((id, i) => [i ? ", " : "", h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "mono" }, shortId(id))]),
    total > runIds.length ? ` and ${count(total - runIds.length)} more` : "",
  ];
}

/** The preview's runs whose joins would fail again at once (`stuck`): the API's sentence
 * (one of its `warnings`), then their newest runs as links, each run's page having the
 * Reprocess dead letters button that runs its children again; or, when every one failed on
 * CANCELLED children (which no reprocess runs again), its Resolve and Start over. */
function stuckBlocks(preview) {
  const stuck = preview.stuck;
  if (!stuck || !stuck.count || !(preview.warnings || []).includes(stuck.message)) return [];
  if (stuck.cancelled === stuck.count) {
    return [
      h("p", { class: "stuck-joins" }, h("strong", {}, "⚠ Resolve or start over instead: "), withCode(sentence(forThePage(stuck.message)))),
      h("p", { class: "stuck-runs" }, "Resolve the join or Start over from each run's page: ", runLinks(stuck.runIds, stuck.count), "."),
    ];
  }
  return [
    h("p", { class: "stuck-joins" }, h("strong", {}, "⚠ Reprocess instead: "), withCode(sentence(forThePage(stuck.message)))),
    h("p", { class: "stuck-runs" }, "Reprocess dead letters from each run's page: ", runLinks(stuck.runIds, stuck.count), "."),
  ];
}

/** One retried run whose joins fail again at once (a batch answer's `stuck[]`), in the
 * monitor's words: the run as a link to its page, where the button that helps is, instead of
 * the API's sentence (the run's whole id, and the CLI's command). */
function stuckRunItem(stuck) {
  const link = h("a", { href: `#/runs/${encodeURIComponent(stuck.runId)}`, class: "mono" }, shortId(stuck.runId));
  const one = stuck.joins.length === 1;
  const names = stuck.joins.map((join) => `'${join}'`).join(", ");
  const fails = `: ${one ? "its join" : "its joins"} ${names} ${one ? "fails" : "fail"} again at once: `;
  if (stuck.childrenCancelled) {
    // Nothing runs a cancelled child again: not even "Reprocess dead letters".
    const were = plural(stuck.childrenCancelled, "child it does not tolerate was", "children were");
    return h("li", { class: "stuck-run" }, link, fails, `${were} CANCELLED; "Resolve" the join or "Start over" the run from its page`);
  }
  const are = plural(stuck.childrenFailed, "child is", "children are");
  return h("li", { class: "stuck-run" }, link, fails, `${are} still FAILED; "Reprocess dead letters" on its page runs them again`);
}

/** The box a batch retry's answer puts under its line for the retried runs whose joins fail
 * again at once (`stuck`): each a link to its page, then one button that reprocesses the dead
 * letters of those whose children are still FAILED (`done` after it, to redraw the list). Null
 * when there is none. */
export function stuckResultBox(stuck, done = async () => {}) {
  if (!stuck || !stuck.length) return null;
  const head = `⚠ ${plural(stuck.length, "retried run fails", "retried runs fail")} again at once:`;
  return h("div", { class: "warning-box stuck-result" }, h("p", {}, h("strong", {}, head)), h("ul", {}, stuck.map(stuckRunItem)), reprocessStuck(stuck, done));
}

/** "Reprocess dead letters of N runs" for the stuck runs whose children are still FAILED
 * (`POST /runs/reprocess`: each as its page's button does it), confirmed first, its answer
 * said under it; null when every stuck run failed on CANCELLED children, which no reprocess
 * runs again. */
function reprocessStuck(stuck, done) {
  const ids = stuck.filter((run) => run.childrenFailed > 0).map((run) => run.runId);
  if (!ids.length) return null;
  const runs = plural(ids.length, "run");
  const said = h("div", { class: "reprocess-result", role: "status" });
  const button = h("button", { type: "button", class: "secondary reprocess-stuck" }, `Reprocess dead letters of ${runs}`);
  button.addEventListener("click", async () => {
    const ok = await confirmAction({
      title: `Reprocess dead letters of ${runs}?`,
      text: "Each run's FAILED children run again and its join reopens. A run whose reprocess would reopen a run that has SUCCEEDED is left alone (reprocess it from its page).",
      confirm: "Reprocess",
    });
    if (!ok) return;
    button.disabled = true;
    try {
      const answer = await api("/runs/reprocess", { method: "POST", body: { ids } });
      const skipped = answer.skipped.slice(0, 5).map((run) => skippedRunText(run, "reprocessed"));
      const text = `Reprocessed ${plural(answer.reprocessed.length, "run")} (${plural(answer.revived, "child runs", "children run")} again), skipped ${count(answer.skipped.length)}${skipped.length ? `: ${skipped.join("; ")}${answer.skipped.length > 5 ? "; …" : ""}` : ""}.`;
      const warnings = answer.warnings || [];
      fill(said, h("p", { class: "ok-box" }, text), warningsBox(warnings, { breakers: answer.breakers }));
      announce(withWarnings(text, warnings), warnings.length ? "warning" : "ok");
    } catch (error) {
      button.disabled = false;
      fill(said, h("p", { class: "error-box", role: "alert" }, failedAction("Reprocess", error)));
      return;
    }
    await redrawAfter(done);
  });
  return h("div", { class: "reprocess-stuck-block" }, button, said);
}

/** The batch's skip reasons as the dialog says them of one run (`one`) or of several (the
 * CLI's dry run says them so too: `PREVIEW_SKIP_WORDS` and `PREVIEW_SKIP_WORDS_OF_ONE`). */
const SKIP_WORDS = {
  parent_succeeded: (one) => (one ? "under a SUCCEEDED run (its retry would reopen a finished run's join; name it alone to retry it)" : "under a SUCCEEDED run (their retry would reopen a finished run's join; name one alone to retry it)"),
  run_not_failed: () => "not FAILED",
  started_over: (one) => (one ? "started over (its retry would send its calls a second time, beside the new run's; look at that one)" : "started over (their retry would send their calls a second time, beside the new runs'; look at those)"),
  run_not_found: () => "not found",
  deployment_run: (one) => (one ? "a deployment's own run (act on its deployment)" : "deployments' own runs (act on their deployments)"),
  run_past_retention: (one) => (one ? "being deleted (run retention or a purge is deleting its tree; start its root over to run its input again)" : "being deleted (run retention or a purge is deleting their trees; start their roots over to run their input again)"),
};

/** Why the batch skipped one run, in words: "57328cef: a deployment's own run, not retried"
 * (`done`: "reprocessed" for a batch reprocess's). The API's `reason` is a code for scripts;
 * with the state beside it ("deployment_run: FAILED") the state read as the reason. The CLI
 * says them in the same words. */
export function skippedRunText(skipped, done = "retried") {
  const words = {
    run_not_failed: skipped.state ? `not FAILED (it is ${skipped.state}), not ${done}` : null,
    run_not_found: "not found",
    deployment_run: `a deployment's own run, not ${done} (act on its deployment)`,
    parent_succeeded: "under a SUCCEEDED run, not retried (retry it alone to reopen that run's join)",
    started_over: `started over, not ${done} (look at its new run)`,
    run_past_retention: `being deleted, not ${done} (start its root over)`,
    run_cancelled: `CANCELLED, not ${done}`,
    no_dead_letters: "no dead letters left to run again",
    reopens_succeeded: `its reprocess would reopen a SUCCEEDED run, not ${done} (reprocess it alone from its page)`,
  }[skipped.reason];
  return `${shortId(skipped.runId)}: ${words || skipped.message || skipped.reason}`;
}

/** The links of a skip reason's newest runs (`runIds` of `total`), a run started over with
 * the run it was started over as: ": 1a2b3c4d (started over as 5e6f7a8b)". */
function skippedLinks(runIds, newRunIds, total) {
  if (!runIds.length) return [];
  const link = (id) => h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "mono" }, shortId(id));
  const paired = newRunIds.length === runIds.length;
  return [
    ": ",
    runIds.map((id, i) => [i ? ", " : "", link(id), paired ? [" (started over as ", link(newRunIds[i]), ")"] : ""]),
    total > runIds.length ? ` and ${count(total - runIds.length)} more` : "",
  ];
}

/** The preview's runs the batch would skip, by reason, each with the newest of them as
 * links: "3 matched are skipped: under a SUCCEEDED run (…): 1a2b3c4d, …" (`considered`:
 * "matched" by a filter, or "selected"); null when none. */
function skippedText(preview, considered) {
  const groups = preview.skipped || [];
  const total = groups.reduce((sum, group) => sum + group.count, 0);
  if (!total) return null;
  const byReason = new Map();
  for (const group of groups) {
    const seen = byReason.get(group.reason) || { n: 0, runIds: [], newRunIds: [] };
    seen.n += group.count;
    seen.runIds.push(...(group.runIds || []));
    seen.newRunIds.push(...(group.newRunIds || []));
    byReason.set(group.reason, seen);
  }
  const reasons = [...byReason]
    .sort((a, b) => b[1].n - a[1].n)
    .map(([reason, { n, runIds, newRunIds }], i) => [
      i ? "; " : "",
      byReason.size === 1 ? "" : `${count(n)} `,
      SKIP_WORDS[reason] ? SKIP_WORDS[reason](n === 1) : reason,
      skippedLinks(runIds, newRunIds, n),
    ]);
  return [`${count(total)} ${considered} ${total === 1 ? "is" : "are"} skipped: `, reasons];
}

/** What a batch retry's confirm dialog says first, from its preview (`POST
 * /runs/retry/preview`): the runs that would fail the same way at once, the runs whose joins
 * would, those the batch would skip, `extra` (a note of the caller's), then the other
 * warnings (a version rolled back, an open breaker). Empty when the preview has nothing to
 * say. */
export function previewBlocks(preview, considered, extra = null) {
  const skippedNote = skippedText(preview, considered);
  const fixFirst = fixFirstBlocks(preview);
  const stuck = stuckBlocks(preview);
  // The fix-first sentence leads the API's warnings, the stuck joins' has its own block:
  // said above, not again below.
  const said = (preview.warnings || []).slice(fixFirst.length ? 1 : 0).filter((w) => !stuck.length || w !== preview.stuck.message);
  const warned = said.length ? [h("p", {}, h("strong", {}, "⚠ Before you retry:")), h("ul", {}, said.map((w) => h("li", {}, warningNodes(w, preview.breakers))))] : [];
  return [...fixFirst, ...stuck, skippedNote ? h("p", {}, "⚠ ", skippedNote, ".") : null, extra, ...warned].filter(Boolean);
}

/** "all 12 matching FAILED runs", but "the 1 matching FAILED run": "all" of one reads wrong. */
function everyOf(n, noun) {
  return `${n === 1 ? "the" : "all"} ${plural(n, noun)}`;
}

/** The button; `filterOf()` is the list's current filter, `done()` reloads the list. Only a
 * list of any status or of FAILED runs offers it: a batch retry retries FAILED runs only. */
export function retryAllButton(filterOf, result, done) {
  const button = h("button", { type: "button", class: "secondary retry-all" }, "Retry all matching…");
  button.addEventListener("click", async () => {
    const filter = batchFilter(filterOf());
    // Disabled while the runs are counted, the button loses the focus; it gets it back, so
    // the dialog returns the focus to it when it closes (not to <body>).
    const focused = document.activeElement === button;
    button.disabled = true;
    let preview;
    try {
      preview = await api("/runs/retry/preview", { method: "POST", body: { filter, limit: MAX_BATCH } });
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, `Could not count the runs: ${error.message}`));
      return;
    } finally {
      button.disabled = false;
      if (focused) button.focus();
    }
    const { matching: n, truncated: more } = preview;
    const skippedNote = skippedText(preview, "matched");
    // The batch considers the runs it takes and those it skips: sent as its `limit`, it
    // considers these same runs.
    const considered = n + (preview.skipped || []).reduce((sum, group) => sum + group.count, 0);
    if (!n) {
      const none = skippedNote ? ["Nothing to retry: ", skippedNote, "."] : "No FAILED run matches these filters.";
      // Nothing happened: said in the warning colour, not the green of a done action.
      fill(result, h("p", { class: "warning-box nothing-to-retry", role: "status" }, none), warningsBox(preview.warnings || [], { breakers: preview.breakers }));
      return;
    }
    const cap = more ? h("p", {}, `⚠ More than ${count(MAX_BATCH)} match: one batch takes ${count(MAX_BATCH)}; retry again for the rest.`) : null;
    const notes = previewBlocks(preview, "matched", cap);
    const ok = await confirmAction({
      // Of those matched, some may be skipped (said below): then not "all" of them.
      title: considered > n ? `Retry ${count(n)} of the ${plural(considered, "matching FAILED run")}?` : `Retry ${everyOf(n, "matching FAILED run")}?`,
      text: `The failed steps of ${more ? `the newest ${count(n)} of the FAILED runs` : everyOf(n, "FAILED run")} these filters match (every page, not only this one) run again, with the steps stopped when each failed; completed steps are kept.`,
      noteBlocks: notes.length ? notes : null,
      confirm: `Retry ${count(n)}`,
    });
    if (!ok) return;
    try {
      const answer = await api("/runs/retry", { method: "POST", body: { filter, limit: considered } });
      const skipped = answer.skipped.slice(0, 5).map((run) => skippedRunText(run));
      const text = `Retried ${count(answer.retried.length)}, skipped ${count(answer.skipped.length)}${skipped.length ? `: ${skipped.join("; ")}${answer.skipped.length > 5 ? "; …" : ""}` : ""}.`;
      // Each run whose joins fail again at once as a link to its page (the API's sentences
      // gave its whole id and the CLI's command, with no way to its Reprocess button).
      const stuck = stuckResultBox(answer.stuck, done);
      const warnings = answer.warnings || [];
      fill(result, h("p", { class: "ok-box" }, text), warningsBox(warnings, { breakers: answer.breakers }), stuck);
      const said = withWarnings(text, warnings) + (stuck ? ` ${stuck.textContent}` : "");
      announce(said, warnings.length || stuck ? "warning" : "ok");
    } catch (error) {
      fill(result, h("p", { class: "error-box", role: "alert" }, failedAction("Batch retry", error)));
    }
    // Not answered (the API stopped mid-batch): the list stays as it was, its poller saying so.
    await redrawAfter(done);
  });
  return button;
}
