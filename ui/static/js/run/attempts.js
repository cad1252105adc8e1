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
