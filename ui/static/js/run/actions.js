// The operator's buttons on a run: Retry, Start over, Reprocess dead letters, Cancel (and
// Resolve, on a failed step). Each asks first and shows what the API answered, with the
// warnings it gave (a retry's steps meeting an open breaker, with a link to its Reset on the
// Destinations page; joins that fail again at once; a finished run reopened). Retry, Start
// over and Reprocess read the API's preview first, so their dialogs say those warnings (or
// the API's refusal) before the click; so does Resolve, when it would reopen a finished run.

import { api, failedAction, redrawAfter } from "../api.js";
import { chooseAction, editJson } from "../dialog.js";
import { announce, fill, focusIfLost, h } from "../dom.js";
import { plural, shortId, startedOverWords, time } from "../format.js";
import { SET_QUOTA_COMMAND, setQuotaCommand } from "../quota.js";
import { warningNodes, warningsBox, withCode, withWarnings } from "../warnings.js";

function path(runId, action) {
  return `/runs/${encodeURIComponent(runId)}/${action}`;
}

/** Ask (with what `preview()` says the action would set off, when it is given: `{text,
 * blocks}`, the dialog's sentence and its warnings), send, say what the API answered (and,
 * under it, each of its `warnings`: what the action done sets off that the operator may not
 * expect); true when it was sent (done or refused: either way the page's view of the run may
 * be stale), false when the operator backed out. A button of the preview's note may choose an
 * action of `instead` (by its value) over this one. */
async function perform(where, options) {
  const { title, note, confirm, dismiss, danger, preview, instead = {} } = options;
  // A preview the API cannot give (an older API, a refusal) leaves the dialog as it was.
  const previewed = preview ? await preview().catch(() => null) : null;
  if (previewed?.refused) {
    // The API would refuse the action: the dialog says why and offers only what can work
    // (the blocks' links, e.g. to the run a start over made, and Close), no button for it.
    await chooseAction({ title, text: previewed.text, noteBlocks: previewed.blocks, confirm: null, dismiss: "Close" });
    return false;
  }
  const text = previewed?.text || options.text;
  const blocks = previewed?.blocks || null;
  const noteBlocks = blocks && note ? [h("p", {}, "⚠ ", note), blocks] : blocks;
  const choice = await chooseAction({ title, text, note, noteBlocks, confirm, dismiss, danger });
  // The button chosen in the note is the confirmation of the action it names.
  const chosen = Object.hasOwn(instead, choice) ? instead[choice] : choice === "ok" ? options : null;
  if (!chosen) return false;
  await sendAndShow(where, chosen);
  return true;
}

async function sendAndShow(where, { name, send, describe, warningsOf = (a) => a.warnings }) {
  try {
    const answer = await send();
    const warnings = warningsOf(answer);
    const said = `✓ ${describe(answer)}`;
    // When it was answered, kept current as the page ticks: "the run is RUNNING" stays true
    // of that moment only, beside a badge that moves on (a tour read it as stale).
    const when = h("span", { class: "muted action-when" }, " · ", time(Date.now() / 1000));
    // No live region: `announce` says the answer once; the ticking time would be read again
    // at every tick.
    const line = h("p", { class: "ok-box" }, said, when);
    fill(where, line, warningsBox(warnings, { breakers: answer.breakers }));
    announce(withWarnings(said, warnings), warnings?.length ? "warning" : "ok");
  } catch (error) {
    const line = h("p", { class: "error-box", role: "alert" }, `✕ ${failedAction(name, error)}`);
    fill(where, line);
    announce(line.textContent, "error");
  }
}

/** A retry's warnings (answered, or previewed: `RetryResult` and `RetryPreview` say them in
 * the same order: the ancestor reopened, the stuck joins, then each open breaker), the stuck
 * joins' in the monitor's words: its own Reprocess button, not the CLI command. */
function retryWarnings(answer, { stuck = true } = {}) {
  const warnings = [...(answer.warnings || [])];
  if (answer.stuckJoins?.length) {
    const at = answer.reopenedRun ? 1 : 0;
    if (!stuck) return warnings.filter((_, index) => index !== at);
    const one = answer.stuckJoins.length === 1;
    const names = answer.stuckJoins.map((j) => `'${j}'`).join(", ");
    const fails = `${one ? "its join" : "its joins"} ${names} ${one ? "fails" : "fail"} again at once`;
    if (answer.childrenCancelled) {
      // Nothing runs a cancelled child again: not even "Reprocess dead letters".
      const were = plural(answer.childrenCancelled, "child it does not tolerate was", "children were");
      warnings[at] = `${fails}: ${were} CANCELLED, which neither a retry nor a reprocess runs again; "Resolve" the join with the output it should give, or "Start over" the run`;
      return warnings;
    }
    const still = plural(answer.childrenFailed, "child is", "children are");
    warnings[at] = `${fails}: ${still} still FAILED; "Reprocess dead letters" runs them again and reopens ${one ? "it" : "them"}`;
  }
  return warnings;
}

/** What Retry's dialog says before the click, from the API's preview: what runs again (the
 * failed steps, and the steps stopped when the run failed: its `message`), each warning the
 * retry would give and, when its joins would fail again at once, the Reprocess button instead
 * (`offerReprocess`: not when the failure comes from the workflow or input, which a
 * reprocess meets again: the fix note says what to do, and the stuck joins go unsaid). */
async function retryPreview(runId, offerReprocess) {
  const preview = await api(path(runId, "retry/preview"));
  // A FAILED run the API would refuse (its root was started over, a deployment's own run):
  // the dialog says the refusal, not a retry that will not happen.
  if (!preview.retriable && preview.warnings?.length) return refusedPreview("retry", preview.warnings[0], preview.newRunId);
  if (!preview.retriable) return null;
  const text = preview.message ? `${capitalised(preview.message)}; completed steps keep their results.` : null;
  const warnings = retryWarnings(preview, { stuck: offerReprocess });
  if (!warnings.length) return { text, blocks: null };
  return {
    text,
    blocks: [
      h("p", {}, h("strong", {}, "⚠ Before you retry:")),
      h("ul", {}, warnings.map((w) => h("li", {}, warningNodes(w, preview.breakers)))),
      preview.stuckJoins.length && offerReprocess && !preview.childrenCancelled
        ? h("p", {}, h("button", { type: "submit", value: "reprocess", class: "primary reprocess-instead" }, "Reprocess dead letters"), " instead")
        : null,
    ],
  };
}

/** A dialog's words for an action the API would refuse (or, `text` given, answer without
 * doing anything), with its sentence (its commands as code) and, when it names one, a link to
 * the run to look at instead (`newRunId`: the run a start over made). */
function refusedPreview(action, sentence, newRunId = null, text = `This ${action} would be refused.`) {
  return {
    refused: true,
    text,
    blocks: [
      h("p", { class: "refused-note" }, h("strong", {}, "⚠ "), withCode(sentence)),
      newRunId ? h("p", { class: "refused-instead" }, h("a", { href: `#/runs/${encodeURIComponent(newRunId)}` }, `Open run ${shortId(newRunId)}`), " (the run that start over made)") : null,
    ],
  };
}

/** What Start over's dialog says before the click, from the API's preview: the version the
 * new run runs and the start over's warnings (that version was rolled back by a deployment,
 * or no longer serves); or the refusal. A run started over already: the run that start over
 * made, a link to it and Close, no Start over button (the API would answer that run again and
 * start nothing: the tour read the button as a second new run). */
async function startOverPreview(runId) {
  const preview = await api(path(runId, "start-over/preview"));
  if (!preview.startable && preview.newRunId) {
    return refusedPreview("start over", capitalised(preview.message), preview.newRunId, "Another start over would start nothing.");
  }
  if (!preview.startable) return refusedPreview("start over", preview.message);
  const text = `${capitalised(preview.message)}, linked to this one.`;
  if (!preview.warnings.length) return { text, blocks: null };
  return {
    text,
    blocks: [h("p", {}, h("strong", {}, "⚠ Before you start over:")), h("ul", {}, preview.warnings.map((w) => h("li", {}, warningNodes(w))))],
  };
}

function capitalised(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** What Reprocess's dialog says before the click, from the API's preview: its warnings (a run
 * that had SUCCEEDED runs again from its join, the steps after the join that send their calls
 * a second time and what they call, an open breaker), as `{text, blocks}` (`perform` reads a
 * preview so). The warnings name each step already: listing them again under it said every
 * step twice. Nothing to warn of: the dialog as it was. */
async function reprocessPreview(runId) {
  const preview = await api(path(runId, "reprocess/preview"));
  if (!preview.reprocessable || !preview.revived || !preview.warnings.length) return null;
  return {
    text: null,
    blocks: [
      h("p", {}, h("strong", {}, `⚠ Before you reprocess ${plural(preview.revived, "dead-lettered child", "dead-lettered children")}:`)),
      h("ul", {}, preview.warnings.map((w) => h("li", {}, warningNodes(w, preview.breakers)))),
    ],
  };
}

/** When a FAILED spawner's fan-out failed for its tenant's run quota, what Retry's dialog
 * says first: the quota counts runs created, so a retry alone fails the same way until an
 * admin raises it — with the command the error names (`N` when an older API's does not), as
 * `runs show` leads with it. The monitor has no tenant settings of its own. */
function quotaNote(detail) {
  const step = detail.steps.find((s) => s.status === "FAILED" && s.error?.kind === "quota_exceeded");
  if (!step) return null;
  const named = SET_QUOTA_COMMAND.exec(step.error.message || "");
  const command = named ? named[1] : setQuotaCommand(detail.tenantId);
  return [
    `The fan-out of step ${step.vertexId} needs more runs than tenant ${detail.tenantId} has left in its quota, so a retry alone fails the same way: an admin raises the quota first, with `,
    h("code", {}, command),
    ".",
  ];
}

/** When the run failed for a cause the workflow or its input makes (a step's own, or most of
 * a failed join's children's), what Retry's, Reprocess's and Start over's dialogs say first:
 * the API's sentence (`fixFirst`: fix, publish, submit anew), the one `runs show` and `runs
 * retry --dry-run` lead with. */
function fixNote(detail) {
  return detail.fixFirst ? withCode(capitalised(detail.fixFirst)) : null;
}

/** Why Start over is unavailable (the API's refusals: start_over_child_run, run_not_ended). */
function startOverWhyNot(detail) {
  if (detail.parentRunId) return "a child run cannot be started over alone";
  return "the run has not ended";
}

/** Why Retry, Reprocess and Resolve are unavailable on a run that was started over, or that
 * is under a root run that was (the API refuses them, 409 started_over: the new run already
 * sends its calls); null when neither was. */
function startedOverWhy(detail) {
  const newRun = detail.startedOverAs;
  if (!newRun) return null;
  const { sentence } = startedOverWords(detail.restarts.length > 0, shortId(newRun));
  return `${sentence}: look at that run; a run can be retried only while nobody has started it over`;
}

/** The engine's own run of a deployment (route "system"): the API refuses retry, resolve,
 * start over and reprocess on it (409 deployment_run: they would rewrite the record of the
 * deployment's stages), so the bar offers none of them, and says where to act instead. */
export function isDeploymentRun(detail) {
  return detail.route === "system";
}

function deploymentNote(detail) {
  const id = detail.deploymentId;
  const link = id ? h("a", { href: `#/deployments/${encodeURIComponent(id)}` }, "its deployment") : "its deployment";
  return h("p", { class: "small muted deployment-run-note" }, "The engine's own run: its steps are a deployment's stage checks. Act on ", link, " instead (abort, roll back, or start a new deployment); cancelling this run aborts the deployment.");
}

/** What the action bar of `detail` shows, as a string: the page redraws the bar only when
 * this changes, so a button keeps its element (and a keyboard user's focus) while the run's
 * progress streams in. */
export function actionBarKey(detail) {
  const quota = detail.steps.filter((s) => s.status === "FAILED" && s.error?.kind === "quota_exceeded").map((s) => [s.vertexId, s.error.message]);
  const fix = detail.fixFirst || null;
  return JSON.stringify([detail.id, detail.status, detail.fanout.failed, detail.parentRunId, detail.route, detail.tenantId, detail.startedOverAs, quota, fix]);
}

/** The action bar of `detail`; `done()` reloads the page after an action, refused ones too: a
 * refusal (409 with the run's state) usually means someone else acted first. */
export function actionBar(detail, result, done) {
  const id = detail.id;
  const ended = ["SUCCEEDED", "FAILED", "CANCELLED"].includes(detail.status);
  const deadLetters = detail.fanout.failed > 0 && detail.status !== "CANCELLED";
  const button = (label, enabled, why, options, cls = "secondary") =>
    h(
      "button",
      {
        type: "button",
        class: cls,
        disabled: !enabled,
        title: enabled ? null : why,
        onclick: async () => {
          if (!(await perform(result, options))) return;
          await redrawAfter(done);
          // Retry disables Retry, Cancel disables Cancel: the answer takes the focus then.
          focusIfLost(result.firstElementChild);
        },
      },
      label,
    );
  const reprocess = {
    name: "Reprocess",
    title: "Reprocess the dead letters?",
    text: `The ${plural(detail.fanout.failed, "FAILED child runs", "FAILED children run")} again; the join reopens.`,
    note: fixNote(detail),
    confirm: "Reprocess",
    preview: () => reprocessPreview(id),
    send: () => api(path(id, "reprocess"), { method: "POST" }),
    describe: (a) => a.message,
  };
  const engineOwned = isDeploymentRun(detail);
  const restarted = startedOverWhy(detail);
  return h(
    "div",
    { class: "actions", role: "toolbar", "aria-label": "Operator actions" },
    engineOwned ? deploymentNote(detail) : null,
    engineOwned ? null : button("Retry", detail.status === "FAILED" && !restarted, restarted || "only a FAILED run can be retried", {
      name: "Retry",
      title: "Retry this run?",
      text: "Its FAILED steps run again; completed steps keep their results.",
      note: quotaNote(detail) || fixNote(detail),
      confirm: "Retry",
      preview: () => retryPreview(id, !fixNote(detail)),
      instead: { reprocess },
      send: () => api(path(id, "retry"), { method: "POST" }),
      describe: (a) => a.message,
      warningsOf: retryWarnings,
    }, "primary"),
    engineOwned ? null : button("Start over", ended && !detail.parentRunId, startOverWhyNot(detail), {
      name: "Start over",
      title: "Start this run over?",
      text: "A new run starts with the same input, linked to this one.",
      note: fixNote(detail),
      confirm: "Start over",
      preview: () => startOverPreview(id),
      send: () => api(path(id, "start-over"), { method: "POST" }),
      describe: (a) => [a.message, " — ", h("a", { href: `#/runs/${encodeURIComponent(a.newRunId)}` }, "open the new run")],
    }),
    engineOwned ? null : button("Reprocess dead letters", deadLetters && !restarted, restarted || "no failed child to reprocess", reprocess),
    button("Cancel", !ended, detail.status === "CANCELLED" ? "the run is already cancelled" : "the run has ended: only a running run can be cancelled", {
      name: "Cancel",
      title: "Cancel this run?",
      text: "The run and everything under it still going stop; this cannot be undone.",
      confirm: "Cancel the run",
      dismiss: "Keep running",
      danger: true,
      send: () => api(path(id, "cancel"), { method: "POST" }),
      describe: (a) => a.message,
    }, "danger"),
  );
}

/** What Resolve's dialog says before the click, or null: resolving the last FAILED step of a
 * child run brings it back into its parent's join, as a retry of it does, so when that reopens
 * a run above that had ended SUCCEEDED (the steps after its join run a second time), the retry
 * preview of the child run says it (`reopenedRun`, its first warning). A preview the API
 * cannot give leaves the dialog as it was. */
async function resolveWarning(detail, step) {
  const othersFailed = detail.steps.some((s) => s.status === "FAILED" && s.vertexId !== step.vertexId);
  if (!detail.parentRunId || detail.status !== "FAILED" || othersFailed) return null;
  const preview = await api(path(detail.id, "retry/preview")).catch(() => null);
  return preview?.reopenedRun && preview.warnings?.length ? preview.warnings[0] : null;
}

/** What Resolve's editor starts with, and says of it: the shape the step's dependants read
 * from its output. A GATEWAY's is an answer (`status`, `body`); a MERGE's its children's
 * `counts` (its spawner's, when the run has one) and their `outputs` in item order (a GATEWAY
 * answer there made the steps after the join read nothing, and send that on). */
function resolveTemplate(detail, step) {
  const readAs = "The step becomes RESOLVED with this output and the run continues.";
  if (step.type === "MERGE") {
    const spawners = detail.steps.filter((s) => s.type === "SPAWNER" && s.children);
    const { total, succeeded, failed, cancelled } = spawners.length === 1 ? spawners[0].children : detail.fanout;
    const counts = { total, succeeded, failed, cancelled, pending: total - succeeded - failed - cancelled };
    return {
      initial: { counts, outputs: [] },
      help: `${readAs} Its dependants read it as the join's output: counts, and outputs (one per child in item order, null for a child that did not succeed; left empty, the steps after the join read no outputs).`,
    };
  }
  if (step.type === "GATEWAY") {
    return { initial: { status: 200, body: {} }, help: `${readAs} Its dependants read it as the call's answer: status and body.` };
  }
  return { initial: {}, help: `${readAs} Its dependants read it as the step's output.` };
}

/** Resolve a FAILED step of the run `detail` with an output the operator types (checked as
 * JSON first), saying first, and in the answer's warnings after, when it reopens a finished
 * run above. */
export async function resolveStep(detail, step, result, done) {
  const warning = await resolveWarning(detail, step);
  const template = resolveTemplate(detail, step);
  const edited = await editJson({
    title: `Resolve ${step.vertexId}`,
    help: template.help,
    initial: JSON.stringify(template.initial, null, 2),
    confirm: "Resolve",
    note: warning ? [h("strong", {}, "Before you resolve: "), warningNodes(warning)] : null,
  });
  if (!edited) return;
  await sendAndShow(result, {
    name: "Resolve",
    send: () =>
      api(`/runs/${encodeURIComponent(detail.id)}/steps/${encodeURIComponent(step.vertexId)}/resolve`, {
        method: "POST",
        body: { output: edited.value },
      }),
    describe: (a) => a.message,
  });
  await redrawAfter(done);
  // The step's panel is drawn anew without its Resolve button: the answer takes the focus.
  focusIfLost(result.firstElementChild);
}
