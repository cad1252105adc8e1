// Deployments: every workflow's gradual deployments (candidate against serving version, state,
// stage, weight), and one deployment in full — its stages, each version's runs and failure
// ratio, the exposure with a link to the candidate's runs, the figures behind a rollback, the
// timeline of stage changes, and the Abort and Rollback buttons, each confirmed first.

import { api, failedAction, query, redrawAfter } from "../api.js";
import { confirmAction } from "../dialog.js";
import { announce, fill, focusIfLost, h } from "../dom.js";
import { badge, breakable, count, duration, exactZoned, plural, ratio, shortId, time } from "../format.js";
import { Poller } from "../live.js";
import { drawPager } from "../pager.js";
import { DEPLOYMENTS, wholeId } from "../short_ids.js";
import { warningsBox } from "../warnings.js";

const LIST_SIZE = 50;

function workflowLink(name, version) {
  const target = `#/workflows/${encodeURIComponent(name)}${version ? `?v=${version}` : ""}`;
  return h("a", { href: target }, breakable(name), version ? ` v${version}` : null);
}

function deploymentLink(deployment, text = shortId(deployment.id)) {
  return h("a", { href: `#/deployments/${encodeURIComponent(deployment.id)}`, class: "mono" }, text);
}

function pct(weight) {
  return `${Number(weight).toLocaleString("en-US")} %`;
}

/** What the candidate gets of new runs now. The API's weight is null once a deployment has
 * ended: a promoted candidate then serves every new run, any other gets none — unless the API
 * says it is superseded: another version serves since, so that is history. */
function weightNow(d) {
  if (d.superseded) return `superseded (v${d.servingVersionNow} serves)`;
  if (d.status === "SUCCEEDED") return "100 % (serving)";
  return d.status === "RUNNING" && d.weight !== null ? pct(d.weight) : pct(0);
}

/** What the candidate gets of new runs now, and where the rest go once it has ended. */
function weightNote(d) {
  if (d.superseded) {
    // The weight beside it already says which version serves now.
    const past = d.status === "SUCCEEDED" && d.endedAt ? `v${d.candidateVersion} served from ${exactZoned(d.endedAt)}` : `new runs went back to v${d.servingVersion}`;
    return ` — ${past} until another version replaced it`;
  }
  if (d.status === "SUCCEEDED") return ` — v${d.candidateVersion} now serves: it gets every new run`;
  if (d.status === "RUNNING") return "";
  return ` — new runs go back to v${d.servingVersion}`;
}

/** "stage 2 of 4 (50 %)": the stage in force, or the last one reached. Where the list wraps
 * it (style.css), it goes to a second line before its weight, never inside "(50 %)". */
function stageText(d) {
  const stage = d.stages[d.stage - 1];
  return [h("span", {}, `stage ${d.stage} of ${d.stages.length}`), stage ? [" ", h("span", {}, `(${pct(stage.weight)})`)] : null];
}

/** The monitor's run list showing the runs behind `figures.runsUrl` (`/runs?workflow=…`). */
export function runsLink(figures) {
  const given = new URLSearchParams(figures.runsUrl.split("?", 2)[1] || "");
  const wanted = new URLSearchParams();
  for (const [from, to] of [
    ["workflow", "workflow"],
    ["version", "version"],
    ["route", "route"],
    ["createdAfter", "after"],
    ["createdBefore", "before"],
  ]) {
    if (given.get(from)) wanted.set(to, given.get(from));
  }
  return `#/runs?${wanted.toString()}`;
}

const END_EVENTS = { ROLLED_BACK: "the rollback", SUCCEEDED: "the promotion", ABORTED: "the abort" };

/** "the rollback", "the promotion", "the abort": when an ended deployment recorded its figures. */
function endEvent(d) {
  return END_EVENTS[d.status] || "the end";
}

/** The candidate's figures an ended deployment recorded when it ended (null: running, or none
 * recorded): what decided it. `d.candidate` is the runs as they are now, which an operator's
 * retries of the failed runs rewrite ("rolled back … ratio 0.000"). As `deployments list`. */
function figuresAtEnd(d) {
  if (d.status === "RUNNING" || !d.outcome || !d.outcome.figures) return null;
  const found = d.outcome.figures.candidate;
  return found && typeof found === "object" ? found : null;
}

function ratioNote(d) {
  const atEnd = figuresAtEnd(d);
  return atEnd ? ` · ratio ${ratio(atEnd.failureRatio)} at ${endEvent(d)}` : ` · ratio ${ratio(d.candidate.failureRatio)}`;
}

// ── the list ────────────────────────────────────────────────────────────────────────────────

function listRow(d) {
  return h(
    "tr",
    { "data-deployment": d.id, class: d.status === "ROLLED_BACK" ? "row-failed" : null },
    h("td", {}, deploymentLink(d)),
    h("td", {}, workflowLink(d.workflow)),
    h("td", {}, `v${d.candidateVersion}`, h("span", { class: "muted" }, ` over v${d.servingVersion}`)),
    h("td", {}, badge(d.status)),
    h("td", { class: "stage-cell" }, stageText(d)),
    h("td", { class: "weight-cell" }, weightNow(d)),
    h("td", {}, plural(d.candidate.runs, "run"), d.candidate.refused ? ` (${count(d.candidate.refused)} refused)` : null, h("span", { class: "muted list-ratio" }, ratioNote(d))),
    h("td", {}, time(d.createdAt)),
  );
}

export async function deploymentsPage(main, params) {
  const live = h("span", { class: "live" });
  const body = h("tbody");
  const pager = h("div", { class: "pager" });
  const cursor = params.get("cursor");

  async function load() {
    const page = await api(`/deployments${query({ limit: LIST_SIZE, cursor })}`);
    if (!page.items.length) {
      fill(body, h("tr", {}, h("td", { colspan: "8", class: "empty" }, "No deployments yet: open a workflow's version and press Deploy.")));
    } else {
      fill(body, page.items.map(listRow));
    }
    // More than a page: older ones a page at a time, as the runs list pages.
    if (cursor || page.next) drawPager(pager, "deployments", cursor, page, "deployment");
    return {
      running: page.items.some((d) => d.status === "RUNNING"),
      signature: JSON.stringify(page.items.map((d) => [d.id, d.status, d.stage, d.candidate, d.serving, d.servingVersionNow])),
    };
  }

  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Deployments"), live),
    h("p", { class: "muted" }, "A deployment moves a share of a workflow's new runs to a candidate version, stage by stage, and rolls it back by itself when it fails too often."),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "deployments" },
        h("caption", { class: "sr-only" }, "Deployments, newest first"),
        h("thead", {}, h("tr", {}, ["Deployment", "Workflow", "Candidate", "State", "Stage", "Weight", "Candidate runs", "Started"].map((t) => h("th", { scope: "col" }, t)))),
        body,
      ),
    ),
    pager,
  );
  // A deployment started elsewhere (the CLI, another tab) shows up without a reload.
  const poller = new Poller(load, { intervalMs: 2000, indicator: live, idleIntervalMs: 5000 });
  const first = await load();
  poller.follow(first);
  return () => poller.stop();
}

// ── one deployment ──────────────────────────────────────────────────────────────────────────

/** Why a running deployment's stage holds, as of its latest check, in the API's words — and
 * first of all when no worker is alive, so nothing runs at all (the page would otherwise
 * read "running · live" over a deployment that cannot move). */
function holdingLine(d) {
  if (!d.holding) return null;
  const stalled = d.holding.startsWith("no worker is alive");
  // The check's own figures, with when it was taken: the table below is of now.
  const when = d.holdingCheckedAt ? h("span", { class: "holding-checked" }, "Stage check ", time(d.holdingCheckedAt), ": ") : null;
  return h("p", { class: stalled ? "deploy-holding error-box" : "deploy-holding muted", role: stalled ? "alert" : null }, stalled ? "⚠ " : "", when, d.holding);
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
}

function stagesList(d) {
  const running = d.status === "RUNNING";
  return h(
    "ol",
    { class: "stages", "aria-label": "Stages" },
    d.stages.map((stage) => {
      // A stage after the one a rolled-back or aborted deployment stopped at never comes:
      // "to come" there read as a deployment that would go on.
      let state = running ? "to come" : "not reached";
      if (stage.stage < d.stage || (stage.stage === d.stage && d.status === "SUCCEEDED")) state = "passed";
      else if (stage.stage === d.stage) state = running ? "in force" : `stopped (${d.status.toLowerCase().replace("_", " ")})`;
      const cls = state === "passed" ? "stage-passed" : state === "in force" ? "stage-current" : state === "to come" || state === "not reached" ? "stage-next" : `stage-stopped stage-${d.status.toLowerCase()}`;
      return h(
        "li",
        { class: `stage ${cls}`, "aria-current": state === "in force" ? "step" : null },
        h("strong", {}, pct(stage.weight)),
        h("span", { class: "small" }, ` ${state}`),
        // What the stage waits for in its check's words (the finished runs too): "10 runs"
        // alone read as all of it while the check said "19/20 finished runs".
        h("span", { class: "small muted stage-hold" }, `waits for ${stage.waitsFor}`),
        stage.startedAt ? h("span", { class: "small muted" }, "began ", time(stage.startedAt)) : null,
      );
    }),
  );
}

/** The submissions the candidate's inputSchema refused (422, no run: no list shows them),
 * which its figures count as failed runs; null when there were none. */
export function refusedNote(d) {
  const refused = d.candidate.refused;
  if (!refused) return null;
  return h(
    "p",
    { class: "refused-note" },
    h("strong", {}, `${count(refused)} refused by the candidate's inputSchema`),
    `: submissions routed to v${d.candidateVersion} that v${d.servingVersion} accepts were answered 422 invalid_input (no run); each counts as a failed run of the candidate.`,
  );
}

function figuresTable(d) {
  const row = (role, f) =>
    h(
      "tr",
      { "data-role": role },
      h("th", { scope: "row" }, `v${f.version} `, h("span", { class: "muted" }, role)),
      h("td", {}, count(f.runs)),
      h("td", {}, count(f.succeeded)),
      h("td", {}, count(f.failed)),
      h("td", {}, count(f.cancelled)),
      h("td", {}, count(f.running)),
      h("td", { class: f.failureRatio > d.threshold ? "over" : null }, ratio(f.failureRatio)),
      h("td", {}, onlyRefused(f) ? h("span", { class: "muted" }, "no run: all refused") : h("a", { href: runsLink(f) }, `runs of v${f.version}`)),
    );
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "figures" },
      h("caption", {}, figuresCaption(d)),
      h("thead", {}, h("tr", {}, ["Version", "Runs", "Succeeded", "Failed", "Cancelled", "Running", "Failure ratio", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, row("candidate", d.candidate), row("serving", d.serving)),
    ),
  );
}

/** The table's caption: once the deployment has ended its rows are the runs now, which
 * retries since the end may have changed, beside the figures it ended on. */
function figuresCaption(d) {
  // The runs the deployment routed, not every run of the version since it began (a tour
  // counted the runs made after the rollback too, and read the table as short of them).
  const base = "Runs the deployment routed to each version";
  if (d.status === "RUNNING") return d.holdingCheckedAt ? `${base} — now (the stage check above is of its own time)` : base;
  const atEnd = figuresAtEnd(d);
  const then = atEnd ? ` (at ${endEvent(d)}: ${count(atEnd.failed || 0)} of ${count(atEnd.finished || 0)} finished failed)` : "";
  return `${base} — as they are now, after any retries since ${endEvent(d)}${then}`;
}

/** The rollback policy, with the threshold it gives now when it depends on the serving
 * version's ratio (the higher of the two; the fixed ratio alone until serving has one). */
function policyLine(d) {
  const p = d.rollback;
  const margin =
    p.marginOverServing === null || p.marginOverServing === undefined
      ? ""
      : ` or the serving version's ratio + ${p.marginOverServing}, whichever is higher (threshold now ${ratio(d.threshold)})`;
  return `Rolls back when the candidate's failure ratio exceeds ${p.maxFailureRatio}${margin}, judged once ${plural(p.minFinishedRuns, "run")} of the candidate ${p.minFinishedRuns === 1 ? "has" : "have"} finished since the deployment began; checked every ${duration(d.checkIntervalSeconds)}.`;
}

function exposureSection(d) {
  return h(
    "section",
    { class: "exposure panel-section", "aria-labelledby": "exposure-title" },
    h("h2", { id: "exposure-title" }, "Exposure"),
    h("p", { class: "exposure-figure" }, exposureFigure(d)),
    exposureRuns(d),
  );
}

/** How many runs went to the candidate or, once its inputSchema refused some of them, how
 * many submissions were routed to it, of which how many became runs: `exposure` counts the
 * refusals too, and "13 runs went to it" read wrong when none of the 13 became a run. What
 * follows (`exposureRuns`) says the consequence, not these figures again. As `deployments
 * show` says it. */
function exposureFigure(d) {
  const c = d.candidate;
  const to = ` the candidate v${d.candidateVersion}${d.status === "RUNNING" ? " so far" : ""}`;
  if (!c.refused) return [h("strong", {}, plural(d.exposure, "run")), ` went to${to}.`];
  const routed = [h("strong", {}, plural(d.exposure, "submission")), ` ${d.exposure === 1 ? "was" : "were"} routed to${to}`];
  if (onlyRefused(c)) return [...routed, c.refused === 1 ? " and refused by its inputSchema." : ", all refused by its inputSchema."];
  const became = d.exposure - c.refused;
  return [...routed, `: ${became === 1 ? "1 became a run" : `${count(became)} became runs`}, ${count(c.refused)} ${c.refused === 1 ? "was" : "were"} refused by its inputSchema.`];
}

/** Whether every submission routed to the version was refused by its inputSchema: a refusal
 * becomes no run, so a link to its runs would open an empty list. */
function onlyRefused(figures) {
  return figures.refused > 0 && figures.runs === figures.refused;
}

/** The link to the runs the candidate received, or, when it received only refusals, why
 * there is none to show (as `deployments show` says it); the figure above says how many. */
function exposureRuns(d) {
  const c = d.candidate;
  if (!onlyRefused(c)) return h("p", {}, h("a", { href: runsLink(c), class: "exposure-link" }, `Show the runs v${d.candidateVersion} received`));
  return h("p", { class: "exposure-none" }, `v${d.candidateVersion} received no run: a refused submission does not become a run.`);
}

/** `when`: "when it decided" (a check's verdict) or "when it was stopped" (by hand). */
function figureLine(label, f, when) {
  if (!f) return null;
  return h("li", {}, `${label}: ${count(f.failed)} failed of ${plural(f.finished, "finished run")} (ratio ${ratio(f.failureRatio)}; ${plural(f.runs, "run")} in all ${when})`);
}

function outcomeSection(d) {
  const o = d.outcome;
  if (!o) return null;
  const rolled = d.status === "ROLLED_BACK";
  const figures = o.figures || {};
  const title = { ROLLED_BACK: "Rolled back", ABORTED: "Aborted", SUCCEEDED: "Promoted" }[d.status] || d.status;
  const when = o.actor === "engine" ? "when it decided" : "when it was stopped";
  return h(
    "section",
    { class: ["outcome", rolled ? "error-box" : d.status === "SUCCEEDED" ? "ok-box" : "outcome-neutral"], "aria-labelledby": "outcome-title" },
    h("h2", { id: "outcome-title" }, title, o.stage ? ` at stage ${o.stage}` : ""),
    h("p", { class: "outcome-reason" }, o.reason, o.actor && !o.reason.includes(o.actor) ? h("span", { class: "muted" }, ` — by ${o.actor}`) : null),
    h(
      "ul",
      { class: "outcome-figures" },
      figureLine(`candidate v${d.candidateVersion}`, figures.candidate, when),
      figureLine(`serving v${d.servingVersion}`, figures.serving, when),
      typeof figures.threshold === "number" ? h("li", {}, `threshold ${ratio(figures.threshold)}`) : null,
      typeof figures.stageRuns === "number" ? h("li", {}, `${plural(figures.stageRuns, "run")} of the candidate in the stage`) : null,
    ),
  );
}

const EVENT_WORDS = { started: "started", stage: "next stage", succeeded: "promoted", rolled_back: "rolled back", aborted: "aborted" };

function timelineList(d) {
  return h(
    "ol",
    { class: "deploy-timeline", "aria-label": "Timeline of stage changes" },
    d.timeline.map((e) =>
      h(
        "li",
        { class: `tl-${e.event}` },
        h("time", { datetime: new Date(e.at * 1000).toISOString() }, exactZoned(e.at)),
        " ",
        h("strong", {}, EVENT_WORDS[e.event] || e.event),
        ` · stage ${e.stage}`,
        e.weight === null || e.weight === undefined ? "" : ` · ${pct(e.weight)}`,
        e.note ? h("span", { class: "muted" }, ` — ${e.note}`) : null,
      ),
    ),
  );
}

async function stop(where, d, action, done) {
  const abort = action === "abort";
  const reason = h("input", { id: "stop-reason", name: "reason", maxlength: "500", autocomplete: "off" });
  const fields = [h("label", { for: "stop-reason" }, "Reason (optional)"), reason, h("span", { class: "small muted" }, "Shown with your key in the deployment's outcome, timeline and logs.")];
  const ok = await confirmAction({
    title: abort ? "Abort this deployment?" : "Roll this deployment back?",
    text: abort
      ? `v${d.candidateVersion} gets no new runs and is not promoted; v${d.servingVersion} keeps serving. Runs already on v${d.candidateVersion} finish on it.`
      : `v${d.candidateVersion} gets no new runs and the deployment ends ROLLED_BACK with its figures as they are now. Runs already on v${d.candidateVersion} finish on it.`,
    fields,
    confirm: abort ? "Abort the deployment" : "Roll back",
    danger: true,
  });
  if (!ok) return;
  const why = reason.value.trim();
  let answer;
  try {
    answer = await api(`/deployments/${encodeURIComponent(d.id)}/${action}`, { method: "POST", body: why ? { reason: why } : undefined });
  } catch (error) {
    const line = h("p", { class: "error-box", role: "alert" }, `✕ ${failedAction(abort ? "Abort" : "Rollback", error)}`);
    fill(where, line);
    announce(line.textContent, "error");
    return;
  }
  const line = h("p", { class: "ok-box", role: "status" }, `✓ ${answer.message}`);
  await redrawAfter(done);
  fill(where, line);
  announce(line.textContent, "ok");
  // The page is drawn anew with Abort and Roll back disabled: the answer takes the focus.
  focusIfLost(line);
}

function actions(d, result, done) {
  const running = d.status === "RUNNING";
  const why = running ? null : `the deployment has ended (${d.status.toLowerCase().replace("_", " ")})`;
  return h(
    "div",
    { class: "actions", role: "toolbar", "aria-label": "Deployment actions" },
    h("button", { type: "button", class: "secondary", disabled: !running, title: why, onclick: () => stop(result, d, "abort", done) }, "Abort"),
    h("button", { type: "button", class: "danger", disabled: !running, title: why, onclick: () => stop(result, d, "rollback", done) }, "Roll back"),
    running ? null : h("span", { class: "small muted" }, `No action: ${why}.`),
  );
}

export async function deploymentPage(main, params, given) {
  const id = await wholeId(main, params, given, DEPLOYMENTS);
  if (id === null) return null;
  const live = h("span", { class: "live" });
  const content = h("div");
  const result = h("div", { class: "action-result" });

  function draw(d) {
    fill(
      content,
      h(
        "div",
        { class: "page-head" },
        h("h1", {}, `Deployment of ${d.workflow} v${d.candidateVersion}`, badge(d.status)),
        live,
      ),
      actions(d, result, reload),
      result,
      // While it runs: what its stage waits for, and what may keep it waiting (the start's
      // warning, said again: a child workflow's deployment otherwise looks stuck).
      d.status === "RUNNING" ? holdingLine(d) : null,
      d.status === "RUNNING" ? warningsBox(d.warnings, { className: "deploy-warnings" }) : null,
      facts([
        ["Workflow", workflowLink(d.workflow)],
        ["Candidate", workflowLink(d.workflow, d.candidateVersion)],
        ["Serving (baseline)", workflowLink(d.workflow, d.servingVersion)],
        ["Stage", h("span", { class: "stage-now" }, stageText(d))],
        ["Candidate's weight now", [h("span", { class: "weight-now" }, weightNow(d)), h("span", { class: "muted weight-note" }, weightNote(d))]],
        ["Started", [time(d.createdAt), h("span", { class: "muted" }, ` by ${d.createdBy}`)]],
        ["Ended", time(d.endedAt)],
        // Run retention may have deleted an ended deployment's run: its id then links nowhere.
        ["Driven by", d.runPurged ? h("span", { class: "mono" }, `run ${shortId(d.runId)} (deleted by run retention)`) : h("a", { href: `#/runs/${encodeURIComponent(d.runId)}`, class: "mono" }, `run ${shortId(d.runId)}`)],
      ]),
      outcomeSection(d),
      h("h2", {}, "Stages"),
      stagesList(d),
      h("p", { class: "muted small policy-line" }, policyLine(d)),
      h("h2", {}, "Runs by version"),
      figuresTable(d),
      refusedNote(d),
      exposureSection(d),
      h("h2", {}, "Timeline"),
      timelineList(d),
    );
  }

  async function load() {
    const d = await api(`/deployments/${encodeURIComponent(id)}`);
    draw(d);
    // Promoted, rolled back or aborted, a deployment never changes again: nothing to resume.
    return {
      running: d.status === "RUNNING",
      ended: d.status !== "RUNNING",
      signature: JSON.stringify([d.status, d.stage, d.candidate, d.serving, d.timeline.length, d.holding, d.holdingCheckedAt]),
    };
  }

  async function reload() {
    const outcome = await load();
    if (outcome.ended) poller.stop("ended");
  }

  fill(main, h("p", { class: "crumbs" }, h("a", { href: "#/deployments" }, "Deployments"), " / ", shortId(id)), content);
  // A stage holds for minutes without a change: keep following it for 5 of them.
  const poller = new Poller(load, { intervalMs: 2000, quietLimit: 150, indicator: live, endedWords: "deployment ended · it no longer changes" });
  const first = await load();
  poller.follow(first);
  return () => poller.stop();
}
