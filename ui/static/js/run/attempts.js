// The attempts table's last column: the wait before the next in-process attempt. The backoff
// logged (`retryInMs`) is the least it waited: after it, the next attempt asks admission
// again (a cap, a rate, a breaker) and may be held there, so the column says "≥" and, when
// the next attempt in the history started well after the backoff, how long it really came
// after and why.

import { duration } from "../format.js";

/** How much later than its backoff an attempt must start before the page says it was held
 * (a worker's scheduling and the log's clock make smaller gaps noise). */
const HELD_S = 0.5;

/** The cell's text for `history[index]`: "" when no attempt followed in its execution. */
export function retryAfter(history, index) {
  const a = history[index];
  if (!a.retryInMs) return "";
  const least = `≥ ${duration(a.retryInMs / 1000)}`;
  const next = history.find((b) => b.execution === a.execution && b.attempt === a.attempt + 1);
  if (!next) return least;
  // A line is logged when its attempt ends: the next one started its duration earlier.
  const started = next.at - (next.durationMs ?? 0) / 1000;
  const waited = started - a.at;
  if (waited < a.retryInMs / 1000 + HELD_S) return least;
  return `${least}; came ${duration(waited)} later (waited for admission)`;
}

/** Why an execution ended without a result (`history[].lost`): its cell in the HTTP column,
 * and the row under it that says what it means (`runs show` says the same). */
const LOST = {
  lease_expired: ["lost: lease expired", (w) => `its worker${w} was killed, crashed or hung, and its lease expired`],
  worker_stopped: ["lost: given back", (w) => `its worker${w} stopped and gave the step back`],
  run_failed: ["lost: run failed", () => "its run failed before its next attempt"],
};

/** The lost executions whose call may have reached the destination: the next execution sends
 * it again, with the same Idempotency-Key (at-least-once). */
const MAY_BE_SENT = new Set(["lease_expired", "worker_stopped"]);

/** [HTTP cell, explanation] of a lost execution `a`; null for an attempt. */
export function lostWords(a) {
  if (!a.lost) return null;
  const [cell, why] = LOST[a.lost] || [`lost: ${a.lost}`, () => "no result was recorded"];
  const worker = a.worker ? ` ${a.worker}` : "";
  let text = `Execution ${a.execution} ended without a result: ${why(worker)}`;
  if (MAY_BE_SENT.has(a.lost)) text += "; its call may have been sent (no status was read), and the next execution sends it again";
  return [cell, `${text}.`];
}
