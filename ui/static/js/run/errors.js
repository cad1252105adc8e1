// A structured error as operators read it: kind, where, HTTP status, the body the downstream
// answered and what the step had sent it (as text: whatever they contain, they are never
// markup here), attempts.

import { h, scrollable } from "../dom.js";
import { duration } from "../format.js";
import { resetLink, withCode } from "../warnings.js";
import { childrenWaitingText, reasonWords } from "../waits.js";

/** The box of `error`, its title a heading of `level` (2 on the run, 4 in a step's panel under
 * its h3) and the parts in it one level below, so the page's headings go down a level at a
 * time, as a screen reader's list of them reads the page. */
export function errorBox(error, { title = "Error", past = false, level = 2 } = {}) {
  if (!error) return null;
  const facts = [
    ["Kind", error.kind],
    ["Step", error.vertexId],
    ["HTTP status", error.httpStatus],
    ["Attempts", error.attempts],
    // The wait the refusal asked for (a downstream's Retry-After, a breaker's cool-down) as of
    // the failure: said so, or a run that ended long ago reads as if it were counting down.
    ["Asked to wait", error.retryAfterS ? `${duration(error.retryAfterS)}, when it failed` : null],
  ].filter(([, value]) => value !== null && value !== undefined && value !== "");
  // `past`: the error of an execution before this one (the step runs again, or waits to):
  // in the waiting lines' colour, not the red of a step that has failed.
  return h(
    "section",
    { class: past ? "error-box past-error" : "error-box", "aria-label": title },
    h(`h${level}`, { class: "error-title" }, past ? "↻ " : "✕ ", title),
    h("dl", { class: "facts" }, facts.map(([name, value]) => [h("dt", {}, name), h("dd", { class: name === "HTTP status" ? "http-status" : null }, String(value))])),
    // The commands the engine's sentence quotes in `backticks` (a breaker's reset, a quota's
    // raise) as code, as the warnings and waiting lines show them: not backticks to copy.
    error.message ? errorMessage(error) : null,
    // Refused by an open breaker the API names: its Reset, a click away, as a waiting line's.
    error.breaker ? h("p", { class: "error-reset" }, resetLink(error.breaker)) : null,
    error.bodyExcerpt ? [h(`h${level + 1}`, {}, "Response body (excerpt)"), scrollable(h("pre", { class: "body-excerpt" }, error.bodyExcerpt))] : null,
    sentRequest(error.request, `h${level + 1}`),
  );
}

/** The command a join's `child_failures` message ends with: the CLI's way to list the failed
 * children, which the page does itself. */
const CHILDREN_HINT = /; see `schemabridge runs children (\S+) --status FAILED`$/;

/** The error's sentence; a join's, with a link to its run's failed children in place of the
 * CLI command it ends with (the monitor's reader has the list a click away). */
function errorMessage(error) {
  const hint = error.kind === "child_failures" ? CHILDREN_HINT.exec(error.message) : null;
  if (!hint) return h("p", { class: "error-message" }, withCode(error.message));
  const href = `#/runs/${encodeURIComponent(hint[1])}?children=FAILED`;
  return h("p", { class: "error-message" }, withCode(error.message.slice(0, hint.index)), ". ", h("a", { href, class: "failed-children" }, "Show the failed children"));
}

/** What the failed call sent (`error.request`): "Sent: POST https://…", the names of the
 * headers it set, and the start of its body with a line saying where it was cut. The API
 * shows the step's secrets as *** and keeps no header value. */
function sentRequest(sent, heading) {
  if (!sent) return null;
  return h(
    "div",
    { class: "sent-request" },
    h("p", { class: "sent-line" }, h("strong", {}, "Sent: "), h("code", {}, `${sent.method} ${sent.url}`)),
    sentHeaders(sent, "sent-headers"),
    sentBody(sent, heading, ""),
  );
}

/** The names of the headers a request set (null when none), in a `cls` paragraph. */
function sentHeaders(sent, cls) {
  if (!sent.headerNames || !sent.headerNames.length) return null;
  return h("p", { class: `muted small ${cls}` }, `Headers (names only): ${sent.headerNames.join(", ")}`);
}

/** The start of a request's body under a `heading`, and where it was cut (null: no body);
 * `prefix` starts its parts' classes (the error box's and an attempt's stay apart). */
function sentBody(sent, heading, prefix) {
  if (!sent.bodyExcerpt && !sent.bodyBytes) return null;
  return [
    h(heading, {}, "Request body sent (excerpt)"),
    scrollable(h("pre", { class: `body-excerpt ${prefix}request-body` }, sent.bodyExcerpt)),
    sent.bodyTruncated
      ? h("p", { class: `muted small ${prefix}body-cut` }, `… cut: the first ${sent.bodyExcerpt.length.toLocaleString()} characters of ${sent.bodyBytes.toLocaleString()} bytes sent`)
      : null,
  ];
}

/** What one failed attempt sent (`history[].request`), for its line in the attempts table:
 * "Sent: POST https://…" always in sight, the header names and the body's start once
 * expanded (a <details>; a request with neither is the line alone). */
export function sentByAttempt(sent) {
  if (!sent) return null;
  const line = [h("strong", {}, "Sent: "), h("code", {}, `${sent.method} ${sent.url}`)];
  const more = [sentHeaders(sent, "attempt-sent-headers"), sentBody(sent, "h4", "attempt-")].filter(Boolean);
  if (!more.length) return h("p", { class: "attempt-sent attempt-sent-line" }, line);
  return h("details", { class: "attempt-sent" }, h("summary", { class: "attempt-sent-line" }, line), more);
}

/** Characters of a failed attempt's answer shown on its line; the rest once expanded. */
const ANSWER_LINE_CHARS = 120;

/** What the destination answered a failed attempt (`history[].bodyExcerpt`, itself at most
 * 500 characters), for its line in the attempts table: "Answered: database connection pool
 * exhausted" in sight, a longer answer cut on the line (whole in its title) and whole in a
 * <pre> once expanded. Shown as text, never as HTML. */
export function answerByAttempt(body) {
  if (!body) return null;
  const flat = body.replace(/\s+/g, " ").trim();
  const short = flat.length > ANSWER_LINE_CHARS ? `${flat.slice(0, ANSWER_LINE_CHARS - 1)}…` : flat;
  const line = [h("strong", {}, "Answered: "), h("code", { class: "attempt-answer-text", title: body }, short)];
  if (short === body) return h("p", { class: "attempt-answer attempt-answer-line" }, line);
  return h("details", { class: "attempt-answer" }, h("summary", { class: "attempt-answer-line" }, line), scrollable(h("pre", { class: "body-excerpt attempt-answer-body" }, body)));
}

/** The "why is this waiting" line of a step, when the API says (`waiting`). */
export function waitingLine(step) {
  const waiting = step.waiting;
  if (!waiting) return null;
  const parts = [`${step.vertexId} is waiting`];
  if (waiting.reason) parts.push(`(${waiting.reason})`);
  const line = h("p", { class: "waiting-line", "data-vertex": step.vertexId }, h("span", { "aria-hidden": "true" }, "◷ "), parts.join(" "));
  // `text` is the API's wording (the message with its countdown, e.g. "half-open in 12 s").
  // Its commands in `backticks` as code, as the warnings show them.
  const text = waiting.text || waiting.message;
  if (text) line.append(": ", ...withCode(text));
  // The page's own countdown only where the API's text has none: it counts down a breaker's
  // half-open and a retry's or a redispatch's next try ("next in 507 s"), which read "next
  // in 507 s — about 507 s more" with both.
  const counted = waiting.reason === "breaker_open" || (text && text !== waiting.message);
  if (waiting.until && !counted) {
    const seconds = Math.max(0, Math.round(waiting.until - Date.now() / 1000));
    line.append(h("span", { class: "muted" }, ` — about ${seconds} s more`));
  }
  // Behind a breaker the API names (`waiting.breaker`): its Reset, a click away.
  const reset = resetLink(waiting.breaker);
  if (reset) line.append(" ", reset);
  return line;
}

/** Why a running fan-out's children wait, as `schemabridge runs show` says it: the most
 * common reason with what is true of all those children (the API's `text`), then the others
 * by name; behind one breaker (`breaker`), a link to its Reset. Null when none waits or the
 * run has ended. */
export function childrenWaitingLine(run) {
  const groups = (run.fanout && run.fanout.waiting) || [];
  if (run.endedAt || (run.status && run.status !== "RUNNING") || groups.length === 0) return null;
  const [first, ...others] = groups;
  // Children waiting inside their call are running ones, and said so (waits.js), in words.
  const line = h("p", { class: "waiting-line", "data-children": first.reason }, h("span", { "aria-hidden": "true" }, "◷ "), ...withCode(childrenWaitingText(first)));
  const reset = resetLink(first.breaker);
  if (reset) line.append(" ", reset);
  if (others.length) line.append(h("span", { class: "muted" }, ` (others wait for: ${others.map((g) => reasonWords(g.reason)).join(", ")})`));
  return line;
}

/** After a dead holder's ended lease: only a running worker's next claim takes its steps back
 * (api/cli/fanout_words.py `START_ONE`). */
export const START_ONE = "(`schemabridge services` lists the workers alive; start one if none is)";

/** Who holds a RUNNING step (`holder`, `leaseExpiresAt`), whether it is alive by its
 * heartbeat and when a dead holder's step is taken back, in the words of `runs show`
 * (api/cli/run_display.py `holder_line`): "held by worker w-1 (no heartbeat for 42 s:
 * presumed dead); taken back when its lease ends at 04:07:58", and once that time has passed
 * (`now`, epoch seconds), that the lease ended and the next worker's claim takes it back: a
 * dead holder's step waits for a running worker. */
export function holderLine(step, now = Date.now() / 1000) {
  const holder = step.holder;
  if (!holder || step.status !== "RUNNING") return null;
  const who = holder.worker ? `worker ${holder.worker}` : "a worker";
  const silent = holder.silentS === null || holder.silentS === undefined ? "" : duration(holder.silentS);
  let state = "liveness unknown";
  if (holder.state === "alive") state = silent ? `alive, last heartbeat ${silent} ago` : "alive";
  else if (holder.state === "presumed_dead") state = silent ? `no heartbeat for ${silent}: presumed dead` : "presumed dead";
  let text = `${step.vertexId} is held by ${who} (${state})`;
  if (step.leaseExpiresAt) {
    const ends = clockTime(step.leaseExpiresAt);
    if (holder.state === "alive") text += `; its lease ends at ${ends} unless renewed`;
    else if (leaseEnded(step, now)) text += `; its lease ended at ${ends}: the next worker to claim takes it back ${START_ONE}`;
    else text += `; taken back when its lease ends at ${ends}`;
  }
  return h("p", { class: `holder-line holder-${holder.state}`, "data-vertex": step.vertexId }, h("span", { "aria-hidden": "true" }, holder.state === "presumed_dead" ? "⚠ " : "⚙ "), ...withCode(text));
}

/** Whether the lease of a step a holder not known alive holds has ended by `now`. */
function leaseEnded(step, now) {
  return step.holder?.state !== "alive" && step.leaseExpiresAt && step.leaseExpiresAt <= now;
}

/** The RUNNING steps whose holder's lease has ended by `now`, and the dead holders of running
 * children whose leases have (`fanout.presumedDead`), as a string: a page draws its holder
 * lines again when this changes (a lease ends while nothing else does). */
export function endedLeasesKey(detail, now = Date.now() / 1000) {
  const steps = detail.steps.filter((step) => step.status === "RUNNING" && leaseEnded(step, now)).map((step) => step.vertexId);
  const held = (detail.fanout?.presumedDead || []).filter((group) => group.leaseExpiresAt && group.leaseExpiresAt <= now);
  return [...steps, ...held.map((group) => `${group.holder.worker ?? ""}@${group.leaseExpiresAt}`)].join(",");
}

/** The local time of day, HH:MM:SS. */
export function clockTime(epochS) {
  const date = new Date(epochS * 1000);
  return [date.getHours(), date.getMinutes(), date.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}
