// How waits read, the same words as the CLI (schemas/waiting.py `HELD_WAITS`, `reason_words`;
// api/cli/run_display.py): children whose running step waits inside its call are running ones
// (a worker holds the step), and a SPAWNER PARKED while its children run waits for them.
// Pure functions of the API's views, no DOM.

/** Waits inside a step's execution: its child counts as running, not among the waiting. */
export const HELD_WAITS = {
  admission_wait: "waiting for an admission slot",
  retry_backoff: "waiting to retry a call",
};

const n = (value) => Number(value).toLocaleString("en-US");

/** A wait reason in words where its message is missing ("tenant_rate_limit" → "tenant rate
 * limit"), never the raw code. */
export function reasonWords(reason) {
  return HELD_WAITS[reason] || String(reason || "").replaceAll("_", " ");
}

/** What holds the running children, by reason: "15 of them waiting for an admission slot",
 * then how many a worker presumed dead holds ("37 of them held by a worker presumed dead"),
 * or "" when neither. `groups`: the API's `fanout.waiting`; `dead`: its `fanout.presumedDead`
 * (api/cli/fanout_words.py `running_words`). */
export function heldNote(groups, dead = []) {
  const held = (groups || []).filter((g) => HELD_WAITS[g.reason]);
  const parts = held.map((g, i) => `${n(g.children)}${i === 0 ? " of them" : ""} ${HELD_WAITS[g.reason]}`);
  const deadChildren = (dead || []).reduce((sum, group) => sum + group.children, 0);
  if (deadChildren) parts.push(`${n(deadChildren)}${parts.length ? "" : " of them"} held by a worker presumed dead`);
  return parts.join(", ");
}

/** The running count with what holds them: "23 running (15 of them waiting for an admission
 * slot)", "40 running (37 of them held by a worker presumed dead)", as `schemabridge runs
 * show` says it. */
export function runningWords(running, groups, dead = []) {
  const note = heldNote(groups, dead);
  return note ? `${n(running)} running (${note})` : `${n(running)} running`;
}

/** One group of waiting children as the banner says it: "15 running children waiting for
 * an admission slot of …" (held waits), "327 children waiting to be sent again (redispatch)
 * after …" (a wait that says "waiting …" itself), else "8 children waiting: <what is true of
 * all>".
 * `text`: the API's wording (message with its countdown). */
export function childrenWaitingText(group) {
  const text = group.text || group.message || "";
  const held = HELD_WAITS[group.reason];
  if (held) {
    const who = `${n(group.children)} running ${group.children === 1 ? "child" : "children"}`;
    if (text.startsWith(held)) return `${who} ${text}`;
    return text ? `${who} ${held}: ${text}` : `${who} ${held}`;
  }
  const children = `${n(group.children)} ${group.children === 1 ? "child" : "children"}`;
  // A wait that says its own "waiting …" (a redispatch after an answer) reads on from the count.
  if (text.startsWith("waiting ")) return `${children} ${text}`;
  return `${children} waiting: ${text || reasonWords(group.reason)}`;
}

/** The status a step is shown with: a SPAWNER PARKED with no reason to wait of its own
 * (`waiting`: backpressure, payload store) while its children go on is healthy and
 * "waiting for its children" (AWAITING_CHILDREN, not an API status); any other PARKED stays
 * parked. */
export function shownStatus(step) {
  const c = step.children;
  if (step.type === "SPAWNER" && step.status === "PARKED" && !step.waiting && c && c.total) {
    return c.succeeded + c.failed + c.cancelled < c.total ? "AWAITING_CHILDREN" : step.status;
  }
  return step.status;
}

/** What a deployment's stage step decided, by its output's `outcome`, when its SUCCEEDED
 * does not say it: the `gradual_deploy` run of a deployment its verdict rolled back succeeds
 * (it did its job), the stage that judged it and the later ones too, which read as stages
 * passed. The CLI's `STAGE_OUTCOME_WORDS`; `short` is the graph node's. */
const STAGE_OUTCOMES = {
  rolled_back: { words: "rolled the deployment back", short: "rolled back" },
  not_run: { words: "not run: the deployment had ended", short: "not run" },
};

/** `STAGE_OUTCOMES` of a DEPLOY_STAGE step (null for a stage that passed, or any other step). */
export function stageOutcome(step) {
  if (step.type !== "DEPLOY_STAGE" || !step.output || typeof step.output !== "object") return null;
  return STAGE_OUTCOMES[step.output.outcome] || null;
}

/** What a RESOLVED step shows for its duration (its end is the operator's act, not a
 * call's): the CLI's `RESOLVED_WORDS`. */
export const RESOLVED_WORDS = "resolved by operator";

/** "1 of 24 ended", of a spawner's children (`children`: its counts). */
export function childrenEnded(c) {
  return `${n(c.succeeded + c.failed + c.cancelled)} of ${n(c.total)} ended`;
}

/** The long tail's heading. Its figures are of the children that succeeded or failed (a
 * cancelled child's span says when it was stopped, not how long its work took), while the
 * fan-out's "N of M ended" counts cancelled ones too: the heading says which it counts. */
export function longTailHeading(tail) {
  const which = tail.ended === 1 ? "child that succeeded or failed" : "children that succeeded or failed";
  return `Long tail — durations of the ${n(tail.ended)} ${which}`;
}
