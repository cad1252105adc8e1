// One run: its DAG with each step's status, the fan-out bar and long tail of each SPAWNER, the
// waterfall of its steps, the selected step's error and attempts, its children and its log,
// and the operator's buttons. While it runs it follows `/runs/{id}/events` (server-sent
// events); if the stream cannot be opened it polls once every two seconds instead. Once it
// ended it still looks every ten seconds: an operator may retry, resolve or reprocess it from
// the CLI or another tab, and the page must not go on saying it failed. While it runs a clock
// ticks once a second, so its relative times and durations go on as time passes between
// events; every section that counts children draws from the same progress snapshot, and the
// ones read on their own (the long tail, a page of children) say when they were read.

import { api, ApiUnreachable, stream } from "../api.js";
import { fill, h, scrollable } from "../dom.js";
import { badge, count, duration, errorSummary, liveDuration, plural, shortId, tickTimes, time } from "../format.js";
import { drawGraph } from "../graph.js";
import { Poller, throttle, Ticker } from "../live.js";
import { actionBar, actionBarKey, isDeploymentRun, resolveStep } from "../run/actions.js";
import { ChildrenList } from "../run/children.js";
import { answerByAttempt, childrenWaitingLine, endedLeasesKey, errorBox, holderLine, sentByAttempt, waitingLine } from "../run/errors.js";
import { fanoutBar, fetchLongTail, heldChildrenLines, longTailView, tailContradicts } from "../run/fanout.js";
import { lostWords, retryAfter } from "../run/attempts.js";
import { RunLog } from "../run/log.js";
import { timeline } from "../run/timeline.js";
import { RUNS, wholeId } from "../short_ids.js";
import { childrenEnded, RESOLVED_WORDS, shownStatus, stageOutcome } from "../waits.js";
import { opensAdminPages, whoIsIt } from "../who.js";

/** Statuses of a step that runs again (executing, waiting to retry, parked behind a breaker):
 * an error it keeps is its last execution's, not the step's end. */
const AGAIN = new Set(["RUNNING", "READY", "PARKED"]);

const ENDED_CHECK_MS = 10_000;

function json(value) {
  return scrollable(h("pre", { class: "json" }, value === undefined ? "" : JSON.stringify(value, null, 2)));
}

const ROUTE_WORDS = {
  serving: "the serving version",
  candidate: "a deployment's candidate",
  pinned: "named by the submission",
  system: "the engine's own run",
  start_over: "as the run it starts over",
};

/** A deployment named on the run's page: a link to its page, or for a key the deployment
 * routes refuse (`opens`: `opensAdminPages`), its name as text (its id is no secret: the
 * workflow's serving version names it to every key). */
function deploymentNamed(id, text, className, opens) {
  if (!opens) return h("span", { class: className, title: `deployment ${id}` }, text);
  return h("a", { href: `#/deployments/${encodeURIComponent(id)}`, class: className }, text);
}

/** A candidate's deployment (the API's `deploymentId`). */
function candidateOf(detail, opens) {
  if (detail.route !== "candidate" || !detail.deploymentId) return null;
  const named = deploymentNamed(detail.deploymentId, `deployment ${shortId(detail.deploymentId)}`, "candidate-deployment mono", opens);
  return h("span", { class: "muted" }, " (", named, ")");
}

/** Whether an operator (or a child's retry) made the run run again: its `startedAt` moved past
 * its creation, and its duration counts from then (the time it sat FAILED is not work). */
function againAt(detail) {
  return detail.startedAt !== null && detail.startedAt !== undefined && detail.startedAt > detail.createdAt + 0.001;
}

/** "Ran again" beside "Created", so a duration shorter than created → ended says why. */
function ranAgain(detail) {
  return againAt(detail) ? [["Ran again", time(detail.startedAt)]] : [];
}

/** The run's facts; `opens`: whether the key may open a deployment's page. */
function headline(detail, opens) {
  const facts = [
    ["Run", h("span", { class: "mono", title: detail.id }, detail.id)],
    ["Version", [`v${detail.version}`, detail.route ? h("span", { class: "muted run-route" }, ` · ${ROUTE_WORDS[detail.route] || detail.route}`) : null, candidateOf(detail, opens)]],
    ["Tenant", detail.tenantId],
    // Who submitted it (a key's id, `cli`, `demo`); a child's is its root's submitter.
    ["Created", detail.createdBy ? [time(detail.createdAt), h("span", { class: "muted run-created-by" }, ` · by ${detail.createdBy}`)] : time(detail.createdAt)],
    ...ranAgain(detail),
    ["Ended", time(detail.endedAt)],
    ["Duration", [liveDuration(detail.startedAt, detail.endedAt), againAt(detail) ? h("span", { class: "muted" }, " since it ran again") : null]],
  ];
  if (detail.parentRunId) {
    facts.push(["Parent", [h("a", { href: `#/runs/${encodeURIComponent(detail.parentRunId)}` }, shortId(detail.parentRunId)), ` · ${detail.parentVertexId} item ${detail.itemIndex}`]]);
  }
  const deployment = detail.workflow === "gradual_deploy" && detail.input ? detail.input.deploymentId : null;
  if (typeof deployment === "string") {
    facts.push(["Drives", deploymentNamed(deployment, `the deployment of ${detail.input.workflow} v${detail.input.candidateVersion}`, "drives-deployment", opens)]);
  }
  if (detail.restartedFrom && detail.restartedFromPurged) {
    // Run retention deleted it: its id is all that is left, and a link would open a 404.
    facts.push(["Started over from", `${shortId(detail.restartedFrom)} (deleted by run retention)`]);
  } else if (detail.restartedFrom) {
    facts.push(["Started over from", h("a", { href: `#/runs/${encodeURIComponent(detail.restartedFrom)}` }, shortId(detail.restartedFrom))]);
  }
  if (detail.restarts.length) {
    facts.push(["Started over as", detail.restarts.map((id, i) => [i ? ", " : "", h("a", { href: `#/runs/${encodeURIComponent(id)}` }, shortId(id))])]);
  } else if (detail.startedOverAs) {
    // A child under a root run started over: its actions are refused, the new run is the one to look at.
    facts.push(["Root started over as", h("a", { href: `#/runs/${encodeURIComponent(detail.startedOverAs)}` }, shortId(detail.startedOverAs))]);
  }
  return h("dl", { class: "facts run-facts" }, facts.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, value))));
}

/** A run that SUCCEEDED although some of its children failed or were cancelled (its MERGE
 * tolerated them, or an operator resolved its MERGE): said beside its green badge in the
 * warning colour, or an operator never notices them, with a link to those children
 * ("succeeded — 3 of 100 children failed (tolerated)"; `runs show` says the same). */
function toleratedNote(detail) {
  const { total, failed, cancelled } = detail.fanout;
  if (detail.status !== "SUCCEEDED" || !(failed + cancelled)) return null;
  const of = plural(total, "child", "children");
  const what = failed ? `${count(failed)} of ${of} failed${cancelled ? `, ${count(cancelled)} cancelled` : ""}` : `${count(cancelled)} of ${of} cancelled`;
  const resolved = detail.steps.some((s) => s.type === "MERGE" && s.status === "RESOLVED");
  const how = resolved ? "join resolved by an operator" : "tolerated";
  const href = `#/runs/${encodeURIComponent(detail.id)}?children=${failed ? "FAILED" : "CANCELLED"}`;
  return h(
    "p",
    { class: "tolerated-note", role: "note" },
    `⚠ Succeeded — ${what} (${how}). `,
    h("a", { href }, `Show the ${failed ? "failed" : "cancelled"} children`),
  );
}

/** The worker that made an attempt (`history[].worker`, its service id; null for a tenant
 * key), small under the execution's number: when one host fails its calls, its attempts say
 * so. It wraps anywhere rather than widen the table (a service id may be 128 characters). */
function attemptWorker(worker) {
  if (!worker) return null;
  return h("span", { class: "attempt-worker", title: `Made by worker ${worker} (its service id)` }, worker);
}

/** A lost execution's rows (`history[].lost`): no HTTP status (none was read), its worker,
 * and under it what happened and that its call may have been sent. */
function lostRows(a, [cell, why], width) {
  return [
    h(
      "tr",
      { class: "row-failed row-lost" },
      h("td", { "data-label": "Execution" }, String(a.execution), attemptWorker(a.worker)),
      h("td", { "data-label": "Attempt" }, String(a.attempt)),
      h("td", { "data-label": "At" }, time(a.at)),
      h("td", { "data-label": "HTTP" }, cell),
      h("td", { "data-label": "Took" }, "—"),
      h("td", { "data-label": "Retry after" }, ""),
    ),
    h(
      "tr",
      { class: "row-failed row-error" },
      h("td", {}),
      h("td", { colspan: String(width - 1), class: "attempt-more" }, h("div", { class: "error-line" }, "⚠ ", why)),
    ),
  ];
}

function historyTable(step) {
  if (!step.history.length) return null;
  const columns = ["Execution", "Attempt", "At", "HTTP", "Took", "Retry after"];
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "attempts" },
      h("caption", {}, "Attempts"),
      h("thead", {}, h("tr", {}, columns.map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        // An attempt's error (a URL, a host, an exception: long, without spaces), what the
        // destination answered a failed attempt (the start of its body) and what it sent
        // ("Sent: POST https://…", its header names and body's start once expanded) are a
        // row of their own under it, as the error is on the runs list, so the six columns
        // keep to the panel's width. In a narrow panel each attempt is a block,
        // its cells named by their `data-label` (style.css, 'the attempts table').
        step.history.map((a, index) => {
          const lost = lostWords(a);
          if (lost) return lostRows(a, lost, columns.length);
          const failed = a.error || a.refused || (a.httpStatus ?? 0) >= 400;
          const tr = h(
            "tr",
            { class: failed ? "row-failed" : null },
            h("td", { "data-label": "Execution" }, String(a.execution), attemptWorker(a.worker)),
            h("td", { "data-label": "Attempt" }, String(a.attempt)),
            h("td", { "data-label": "At" }, time(a.at)),
            h("td", { "data-label": "HTTP" }, a.refused ? `refused: ${a.refused}` : a.httpStatus ? String(a.httpStatus) : "—"),
            h("td", { "data-label": "Took" }, a.durationMs === null || a.durationMs === undefined ? "—" : duration(a.durationMs / 1000)),
            h("td", { "data-label": "Retry after" }, retryAfter(step.history, index)),
          );
          if (!a.error && !a.request && !a.bodyExcerpt) return tr;
          return [
            tr,
            h(
              "tr",
              { class: "row-failed row-error" },
              h("td", {}),
              h(
                "td",
                { colspan: String(columns.length - 1), class: "attempt-more" },
                a.error ? h("div", { class: "error-line" }, "✕ ", a.error) : null,
                answerByAttempt(a.bodyExcerpt),
                sentByAttempt(a.request),
              ),
            ),
          ];
        }),
      ),
    ),
  );
}

/** How long a step took. A RESOLVED step's end is when an operator resolved it, so its span
 * is mostly the wait for the operator, not a call: it says so instead of a duration (the
 * API's `StepView.endedAt`; `schemabridge runs show` says the same). */
function stepDuration(step) {
  if (step.status === "RESOLVED") return RESOLVED_WORDS;
  return liveDuration(step.startedAt, step.endedAt);
}

/** A step's status badge; a SPAWNER waiting for its children says how many ended. */
function stepBadge(step) {
  const status = shownStatus(step);
  const outcome = stageOutcome(step);
  if (outcome) return h("span", {}, badge(status), h("span", { class: "muted" }, ` (${outcome.words})`));
  if (status !== "AWAITING_CHILDREN") return badge(status);
  return h("span", {}, badge(status), h("span", { class: "muted" }, ` (${childrenEnded(step.children)})`));
}

function stepPanel(detail, step, result, reload) {
  if (!step) return h("p", { class: "muted" }, "Select a step on the graph or in the list.");
  const facts = [
    ["Status", stepBadge(step)],
    ["Type", step.type || "?"],
    ["Executions", String(step.attempts)],
    ["Auto-retries", String(step.autoRetries)],
    ["Started", time(step.startedAt)],
    ["Duration", stepDuration(step)],
  ];
  if (["READY", "PARKED"].includes(step.status) && step.notBefore > Date.now() / 1000) facts.push(["Not before", time(step.notBefore)]);
  return h(
    "div",
    { class: "step-panel" },
    h("h3", {}, `Step ${step.vertexId}`),
    h("dl", { class: "facts" }, facts.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, value)))),
    waitingLine(step),
    holderLine(step),
    // A run started over (or under a root that was) is not resolved (409 started_over: the
    // new run sends the calls).
    step.status === "FAILED" && !isDeploymentRun(detail) && !detail.startedOverAs
      ? h("button", { type: "button", class: "primary", onclick: () => resolveStep(detail, step, result, reload) }, `Resolve ${step.vertexId}…`)
      : null,
    // A step that failed and runs again (a retry, a redispatch) keeps its last error: said as
    // the last one, or it reads as failed beside its waiting line.
    AGAIN.has(step.status)
      ? errorBox(step.error, { title: `Last error of ${step.vertexId} (it runs again)`, past: true, level: 4 })
      : errorBox(step.error, { title: `Error of ${step.vertexId}`, level: 4 }),
    historyTable(step),
    step.output !== null && step.output !== undefined ? h("details", {}, h("summary", {}, "Output"), json(step.output)) : null,
  );
}

/** What the steps table shows of `detail`, as a string: the table is drawn anew only when it
 * changes (its running durations tick by themselves). */
function stepsKey(detail) {
  return JSON.stringify(detail.steps.map((s) => [s.vertexId, s.status, s.attempts, s.startedAt, s.endedAt, s.children, Boolean(s.waiting), errorSummary(s.error)]));
}

function stepsTable(detail, select) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "steps row-blocks" },
      h("caption", { class: "sr-only" }, "Steps"),
      h("thead", {}, h("tr", {}, ["Step", "Type", "Status", "Executions", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        // In a box narrower than a desktop's (a tablet, a phone) each row is a block: the
        // step's id on its own lines, the other cells under it, each named by its
        // `data-label` (style.css, `row-blocks`).
        detail.steps.map((step) =>
          h(
            "tr",
            { class: step.status === "FAILED" ? "row-failed" : null },
            h("td", { class: "step-id" }, h("button", { type: "button", class: "link", title: step.vertexId, onclick: () => select(step.vertexId) }, step.vertexId)),
            h("td", { "data-label": "Type" }, step.type || "?"),
            h("td", { "data-label": "Status" }, stepBadge(step)),
            h("td", { "data-label": "Executions" }, String(step.attempts)),
            h("td", { "data-label": "Duration" }, stepDuration(step)),
            h("td", { class: "error-line" }, errorSummary(step.error)),
          ),
        ),
      ),
    ),
  );
}

/** The long tail of each SPAWNER of `detail` that has children, requested now. */
function requestTails(detail) {
  return new Map(detail.steps.filter((step) => step.type === "SPAWNER" && step.children).map((step) => [step.vertexId, fetchLongTail(detail.id, step.vertexId)]));
}

/** What a poll compares to tell whether the run moved: its status, its steps' and its
 * fan-out's progress, less a dead holder's silence (`silentS`), which each read counts anew
 * while nothing happens (its `lastSeen` stays). */
function progressSignature(detail) {
  const dead = (detail.fanout.presumedDead || []).map((group) => ({ ...group, holder: { ...group.holder, silentS: null } }));
  return JSON.stringify([detail.status, { ...detail.fanout, presumedDead: dead }, detail.steps.map((s) => s.status)]);
}

export async function runPage(main, params, given) {
  const runId = await wholeId(main, params, given, RUNS);
  if (runId === null) return null;
  const who = whoIsIt(); // read once per key: the header has asked already
  let detail = await api(`/runs/${encodeURIComponent(runId)}`);
  // When `detail.fanout` was read (the page's clock): a dead holder's silence counts on from it.
  let fanoutReadAt = Date.now() / 1000;
  // Everything else the first screen needs is asked for at once, while the graph comes.
  const firstTails = requestTails(detail);
  const graph = await api(`/workflows/${encodeURIComponent(detail.workflow)}/versions/${detail.version}/graph`);
  const opensDeployments = opensAdminPages(await who);
  // The step shown first: a failed one, else one that waits (an open breaker, a rate limit:
  // what holds the run up, its error and attempts beside it), else a fan-out, else the
  // first. A tour opened a run stuck behind a breaker on its fan-out, still pending.
  const first =
    detail.steps.find((step) => step.status === "FAILED") ||
    detail.steps.find((step) => step.waiting && step.type !== "SPAWNER") ||
    detail.steps.find((step) => step.type === "SPAWNER") ||
    detail.steps[0];
  let selected = params.get("step") || (first ? first.vertexId : null);
  let stopped = false;
  const controller = new AbortController();

  const title = h("h1");
  const live = h("span", { class: "live" });
  const result = h("div", { class: "action-result" });
  const actions = h("div");
  let actionsKey = null;
  const facts = h("div");
  const runError = h("div");
  const tolerated = h("div");
  const waiting = h("div", { class: "waiting" });
  const graphBox = h("div", { class: "graph-box" });
  const panel = h("div", { class: "panel" });
  const steps = h("div");
  const fanouts = h("div");
  const tails = new Map();
  const tailData = new Map(); // the long tail last read of each spawner
  const waterfall = h("div");
  // `?children=FAILED` (the tolerated note's link) opens the children filtered by that status,
  // `&cursor=` at that page: the list keeps both in the URL as it is paged and filtered.
  const children = new ChildrenList(runId, params.get("children") || "", params.get("cursor"));
  const log = new RunLog(runId);
  const io = h("div");

  const spawners = () => detail.steps.filter((step) => step.type === "SPAWNER");
  const hasChildren = () => detail.fanout.total > 0;

  function runningOf(vertexId) {
    // The API counts running children per run; with one spawner they are all its own.
    return spawners().length === 1 && spawners()[0].vertexId === vertexId ? detail.fanout.running : 0;
  }

  function select(vertexId) {
    selected = vertexId;
    drawGraphAndPanel();
    panel.querySelector("h3")?.scrollIntoView({ block: "nearest" });
  }

  function drawGraphAndPanel() {
    const byVertex = new Map(detail.steps.map((step) => [step.vertexId, step]));
    const running = new Map(spawners().map((step) => [step.vertexId, runningOf(step.vertexId)]));
    const room = graphBox.clientWidth; // the graph's box, before it is drawn anew
    // A keyboard user's vertex keeps the focus: the graph is drawn anew at each progress.
    const focused = graphBox.contains(document.activeElement) ? document.activeElement.dataset.vertex : null;
    fill(graphBox, drawGraph(graph, { steps: byVertex, running, selected, onSelect: select, room }));
    if (focused) [...graphBox.querySelectorAll(".node")].find((node) => node.dataset.vertex === focused)?.focus();
    fill(panel, stepPanel(detail, byVertex.get(selected), result, reload));
  }

  let shownSteps = null;
  /** The steps table, from the snapshot the graph and the fan-out sections draw (a spawner's
   * row counts the children its bar counts), drawn anew only when it changed; the step
   * button that had the focus gets it back. */
  function drawSteps() {
    const key = stepsKey(detail);
    if (key === shownSteps) return;
    shownSteps = key;
    const focused = steps.contains(document.activeElement) ? document.activeElement.title : null;
    fill(steps, stepsTable(detail, select));
    if (focused) [...steps.querySelectorAll("button")].find((b) => b.title === focused)?.focus();
  }

  function drawFanouts() {
    const dead = detail.fanout.presumedDead || [];
    const blocks = spawners()
      .filter((step) => step.children)
      .map((step) => {
        if (!tails.has(step.vertexId)) tails.set(step.vertexId, h("div", { class: "tail" }, h("p", { class: "muted" }, "Loading the long tail…")));
        const own = runningOf(step.vertexId) > 0; // the run's running children are its own
        return h(
          "section",
          { class: "fanout-section", "data-vertex": step.vertexId, "aria-label": `Fan-out of ${step.vertexId}` },
          h("h2", {}, `Fan-out of ${step.vertexId}`),
          fanoutBar(step.children, runningOf(step.vertexId), own ? detail.fanout.waiting : [], own ? dead : [], fanoutReadAt),
          tails.get(step.vertexId),
        );
      });
    // Several spawners: the API counts the dead holders' children per run, not per spawner.
    const shared = spawners().length > 1 ? heldChildrenLines(dead, fanoutReadAt) : null;
    fill(fanouts, shared, ...blocks);
  }

  /** The operator's buttons, drawn anew only when what they offer changed; the button that
   * had the focus gets it back when they are. */
  function drawActions() {
    const key = actionBarKey(detail);
    if (key === actionsKey) return;
    actionsKey = key;
    const focused = actions.contains(document.activeElement) ? document.activeElement.textContent : null;
    fill(actions, actionBar(detail, result, reload));
    const again = [...actions.querySelectorAll("button")].find((b) => b.textContent === focused && !b.disabled);
    if (again) again.focus();
  }

  // While the run goes on, its relative times and durations move on once a second, and the
  // timeline, drawn up to now, is drawn again; it stops when the run ended.
  const ticker = new Ticker(main, {
    onTick: () => {
      if (!isEnded() && detail.steps.some((step) => step.startedAt && !step.endedAt)) fill(waterfall, timeline(detail));
      // A dead holder's lease ends while nothing of the run changes: its line says so then.
      if (endedLeasesKey(detail) !== leasesDrawn) {
        drawWaiting();
        drawGraphAndPanel();
        drawFanouts();
      }
    },
  });
  let leasesDrawn = "";
  function drawWaiting() {
    leasesDrawn = endedLeasesKey(detail);
    fill(waiting, [...detail.steps.flatMap((step) => [waitingLine(step), holderLine(step)]), childrenWaitingLine(detail)]);
  }
  function keepTime() {
    if (isEnded() || controller.signal.aborted) ticker.stop();
    else ticker.start();
  }

  function drawAll() {
    fill(title, `${detail.workflow} `, h("span", { class: "muted" }, `v${detail.version} `), badge(detail.status));
    fill(facts, headline(detail, opensDeployments));
    drawActions();
    fill(tolerated, toleratedNote(detail));
    fill(runError, detail.status === "FAILED" ? errorBox(detail.error, { title: detail.error && detail.error.vertexId ? `Run failed at ${detail.error.vertexId}` : "Run failed" }) : null);
    drawWaiting();
    drawGraphAndPanel();
    drawSteps();
    drawFanouts();
    fill(waterfall, timeline(detail));
    fill(io, h("details", {}, h("summary", {}, "Input"), json(detail.input)), detail.output !== null ? h("details", { open: detail.status === "SUCCEEDED" }, h("summary", {}, "Output"), json(detail.output)) : null);
    keepTime();
  }

  async function loadTails(requested = requestTails(detail)) {
    await Promise.all(
      [...requested].map(async ([vertexId, tail]) => {
        const data = await tail;
        tailData.set(vertexId, data);
        if (tails.has(vertexId)) fill(tails.get(vertexId), longTailView(data));
      }),
    );
  }

  async function reload() {
    detail = await api(`/runs/${encodeURIComponent(runId)}`);
    fanoutReadAt = Date.now() / 1000;
    drawAll();
    const work = [loadTails(), log.load()];
    if (hasChildren() && children.onFirstPage) work.push(children.load());
    await Promise.all(work);
    childrenBox.hidden = !hasChildren();
    if (!isEnded() && stopped && poller.stopped) follow();
  }

  const isEnded = () => ["SUCCEEDED", "FAILED", "CANCELLED"].includes(detail.status);

  // An ended run changes only by an operator's hand: read it every ENDED_CHECK_MS (not while
  // the tab is hidden) and redraw when it differs; `reload` follows it again if it runs.
  let endedTimer = null;
  // `unanswered`: the last look got no answer, which the header says (until a look is
  // answered) instead of "up to date": a tour read that beside a server it had stopped.
  function watchEnded(unanswered = false) {
    stopped = true;
    ticker.stop();
    poller.show(unanswered ? "run ended · the API is not answering: shown as last read" : "ended");
    clearTimeout(endedTimer);
    endedTimer = setTimeout(async () => {
      if (controller.signal.aborted || !isEnded()) return;
      // "Ended just now" goes on reading right at each look, without a clock of its own.
      ticker.tick();
      let unanswered = false;
      if (!document.hidden) {
        try {
          const fresh = await api(`/runs/${encodeURIComponent(runId)}`);
          if (JSON.stringify(fresh) !== JSON.stringify(detail)) await reload();
        } catch (error) {
          // Not reachable now: said, and looked at again at the next turn.
          unanswered = error instanceof ApiUnreachable;
        }
      }
      if (isEnded() && !controller.signal.aborted) watchEnded(unanswered);
    }, ENDED_CHECK_MS);
  }
  const slowReload = throttle(() => reload().catch(() => {}), 1000);
  // The long tail and the first page of children are read together, so the two sections
  // read on their own say the same moment (each says when).
  const sideReload = throttle(() => {
    loadTails().catch(() => {});
    if (children.onFirstPage) children.load().catch(() => {});
  }, 5000);
  const logFollow = throttle(() => log.load().catch(() => {}), 2000);

  // A long tail that says what the live counts make impossible ("running" beside "running
  // 0") is read again at once, not at its next turn: once per change of those counts, one
  // read at a time, so a tail read just after the counts cannot make it read on a loop.
  let tailCheck = null;
  let checkedFor = null;
  function checkTails() {
    const counts = JSON.stringify([detail.fanout.running, detail.fanout.waitingChildren]);
    if (tailCheck || counts === checkedFor) return;
    if (![...tailData.values()].some((tail) => tailContradicts(tail, detail.fanout))) return;
    checkedFor = counts;
    tailCheck = loadTails()
      .catch(() => {})
      .finally(() => {
        tailCheck = null;
      });
  }

  function applyProgress(progress) {
    const statusChanged = progress.status !== detail.status || progress.steps.some((p) => detail.steps.find((s) => s.vertexId === p.vertexId)?.status !== p.status);
    fanoutReadAt = Date.now() / 1000;
    detail = {
      ...detail,
      status: progress.status,
      fanout: progress.fanout,
      steps: detail.steps.map((step) => {
        const p = progress.steps.find((q) => q.vertexId === step.vertexId);
        return p ? { ...step, status: p.status, children: p.children ?? step.children, waiting: "waiting" in p ? p.waiting : step.waiting } : step;
      }),
    };
    // Every section that counts children draws from this one snapshot.
    drawGraphAndPanel();
    drawSteps();
    drawFanouts();
    drawWaiting();
    keepTime();
    // What was just drawn reads as of now: the rest of the page too, not as of the last tick.
    tickTimes(main);
    if (statusChanged) slowReload();
    checkTails();
    sideReload();
    logFollow();
  }

  const poller = new Poller(
    async () => {
      await reload();
      if (isEnded()) watchEnded();
      return { running: !isEnded(), ended: isEnded(), signature: progressSignature(detail) };
    },
    { intervalMs: 2000, indicator: live },
  );

  async function follow() {
    stopped = false;
    poller.show("live");
    try {
      await stream(
        `/runs/${encodeURIComponent(runId)}/events`,
        (name, data) => {
          if (name === "progress") applyProgress(data);
          else if (name === "end") {
            applyProgress(data);
            watchEnded();
            reload().catch(() => {});
          }
        },
        controller.signal,
      );
      if (!stopped && !controller.signal.aborted) {
        // The server closes a stream after an hour: reconnect once it is read again.
        setTimeout(() => follow(), 1000);
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      stopped = true;
      poller.start(); // the stream failed: poll instead
    }
  }

  const childrenBox = children.element;
  fill(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "Runs"), " / ", shortId(runId)),
    h("div", { class: "page-head" }, title, live),
    facts,
    actions,
    result,
    tolerated,
    runError,
    waiting,
    h("div", { class: "run-grid" }, h("section", { class: "graph-section", "aria-label": "Graph" }, graphBox), h("section", { class: "panel-section", "aria-labelledby": "panel-title" }, h("h2", { id: "panel-title", class: "sr-only" }, "Selected step"), panel)),
    h("section", { "aria-labelledby": "steps-title" }, h("h2", { id: "steps-title" }, "Steps"), steps),
    fanouts,
    h("section", { "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Timeline"), waterfall),
    childrenBox,
    io,
    log.element,
  );
  childrenBox.hidden = !hasChildren();
  drawAll();
  const loads = [log.load(), loadTails(firstTails)];
  if (hasChildren()) loads.push(children.load());
  await Promise.all(loads);
  if ((params.get("children") || params.get("cursor")) && hasChildren()) childrenBox.scrollIntoView({ block: "start" });
  if (isEnded()) watchEnded();
  else follow();
  return () => {
    stopped = true;
    clearTimeout(endedTimer);
    controller.abort();
    ticker.stop();
    poller.stop();
  };
}
