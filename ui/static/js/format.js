// How values read on the page: statuses with an icon and a word (never colour alone), times
// relative with the exact time on hover, durations and numbers.

import { h } from "./dom.js";

const STATUS = {
  PENDING: ["○", "pending"],
  READY: ["◔", "ready"],
  RUNNING: ["▶", "running"],
  // Not a status the API has: a RUNNING child no worker holds a step of (children pages'
  // `waiting`), as the fan-out bar counts it.
  WAITING: ["◔", "waiting"],
  PARKED: ["‖", "parked"],
  // Not a status the API has: a SPAWNER PARKED while its children run (waits.js
  // `shownStatus`), healthy, unlike a park at a cap, a breaker or backpressure.
  AWAITING_CHILDREN: ["▶", "waiting for its children"],
  SUCCEEDED: ["✓", "succeeded"],
  FAILED: ["✕", "failed"],
  RESOLVED: ["✎", "resolved"],
  SKIPPED: ["↷", "skipped"],
  CANCELLED: ["⊘", "cancelled"],
  ROLLED_BACK: ["↺", "rolled back"],
  ABORTED: ["⊘", "aborted"],
};

export function statusIcon(status) {
  return (STATUS[status] || ["?", String(status).toLowerCase()])[0];
}

export function statusWord(status) {
  return (STATUS[status] || ["?", String(status).toLowerCase()])[1];
}

/** A status badge: icon and word, coloured by class (the word carries the meaning). */
export function badge(status) {
  return h(
    "span",
    { class: `badge st-${String(status).toLowerCase()}` },
    h("span", { class: "badge-icon", "aria-hidden": "true" }, statusIcon(status)),
    " ",
    statusWord(status),
  );
}

const UNITS = [
  [86400, "d"],
  [3600, "h"],
  [60, "min"],
  [1, "s"],
];

/** "3 min ago" / "in 12 s" for an epoch-seconds time. */
export function relative(epochS, nowS = Date.now() / 1000) {
  const delta = nowS - epochS;
  const size = Math.abs(delta);
  if (size < 1) return "just now";
  for (const [unit, name] of UNITS) {
    if (size >= unit) {
      const value = Math.floor(size / unit);
      return delta >= 0 ? `${value} ${name} ago` : `in ${value} ${name}`;
    }
  }
  return "just now";
}

export function exact(epochS) {
  const date = new Date(epochS * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.` +
    `${pad(date.getMilliseconds(), 3)}`
  );
}

// Built once: `time()` labels every row of a list on each redraw, and building a formatter
// per call cost ~10 times its use (0.34 against 0.036 ms a call, Node 20 on the dev machine).
let zoneFormat = null;

/** The browser's time zone at that moment, as the browser abbreviates it ("UTC", "CEST",
 * "GMT+2"), or "" if it has none to give. */
export function zoneName(epochS) {
  zoneFormat ??= new Intl.DateTimeFormat(undefined, { timeZoneName: "short" });
  const parts = zoneFormat.formatToParts(new Date(epochS * 1000));
  const zone = parts.find((part) => part.type === "timeZoneName");
  return zone ? zone.value : "";
}

/** `exact` with its zone, "2026-05-04 03:54:44.159 GMT+2": an exact time shown as text is
 * labelled (the CLI prints its times with their zone too), so no one reads local time as
 * UTC or the other way round. */
export function exactZoned(epochS) {
  const zone = zoneName(epochS);
  return zone ? `${exact(epochS)} ${zone}` : exact(epochS);
}

/** A <time> element: relative text, exact local time (with its zone) on hover and in
 * `datetime`. Its `data-at` lets a live page's clock (`tickTimes`) move the text on. */
export function time(epochS) {
  if (epochS === null || epochS === undefined) return h("span", { class: "muted" }, "—");
  return h(
    "time",
    { datetime: new Date(epochS * 1000).toISOString(), title: exactZoned(epochS), "data-at": String(epochS) },
    relative(epochS),
  );
}

/** How long something took: fixed text once it ended; while it goes on (`endedAt` null) a
 * span whose `data-since` (its start) lets a live page's clock (`tickTimes`) count on. */
export function liveDuration(startedAt, endedAt, nowS = Date.now() / 1000) {
  const text = duration(elapsed(startedAt, endedAt, nowS));
  if (startedAt === null || startedAt === undefined || (endedAt !== null && endedAt !== undefined)) return text;
  return h("span", { class: "live-duration", "data-since": String(startedAt) }, text);
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/** One tick of a live page's clock: the relative times (`time`) and the durations still
 * going (`liveDuration`) under `root` read as of `nowS`. Only their text changes, so a tick
 * costs a few text nodes however large the page is. */
export function tickTimes(root, nowS = Date.now() / 1000) {
  for (const el of root.querySelectorAll("time[data-at]")) setText(el, relative(Number(el.dataset.at), nowS));
  for (const el of root.querySelectorAll("[data-since]")) setText(el, duration(Math.max(0, nowS - Number(el.dataset.since))));
}

// The CLI's rule (api/cli/text.py: `_SPAN`, `_SPAN_S`, `parse_duration`), written again here.
const SPAN = /^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$/i;
const SPAN_S = { s: 1, sec: 1, m: 60, min: 60, h: 3600, d: 86400, w: 604800 };
const SECONDS = /^\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i;

/** A span of time as the CLI reads one: seconds ("90") or a number with a unit (60s, 5m,
 * 2h, 1d; also sec, min, w), in seconds. Throws an Error saying what is accepted, in the
 * CLI's words. */
export function parseSpan(text) {
  const given = String(text ?? "");
  let seconds;
  if (SECONDS.test(given)) seconds = Number(given);
  else {
    const span = SPAN.exec(given);
    if (!span) throw new Error(`"${given}" is not a duration: seconds (90) or a span (60s, 5m, 2h, 1d)`);
    seconds = Number(span[1]) * SPAN_S[span[2].toLowerCase()];
  }
  if (!(seconds >= 0) || seconds === Infinity) throw new Error(`"${given}" is not a duration: it is 0 or more seconds`);
  return seconds;
}

/** 0.42 → "420 ms", 75 → "1 min 15 s". Each unit is chosen after rounding, so 9.98 reads
 * "10 s" as 10.02 does, not "10.0 s", and 59.7 reads "1 min", not "60 s". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const ms = Math.round(seconds * 1000);
  if (ms < 1000) return `${ms} ms`;
  const tenths = Math.round(seconds * 10) / 10;
  if (tenths < 10) return `${tenths.toFixed(1)} s`;
  const whole = Math.round(seconds);
  if (whole < 60) return `${whole} s`;
  const minutes = Math.floor(whole / 60);
  const secs = whole % 60;
  if (minutes < 60) return secs ? `${minutes} min ${secs} s` : `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
}

/** How long a run or step took (or has taken so far). */
export function elapsed(startedAt, endedAt, nowS = Date.now() / 1000) {
  if (startedAt === null || startedAt === undefined) return null;
  return Math.max(0, (endedAt ?? nowS) - startedAt);
}

export function count(n) {
  return Number(n ?? 0).toLocaleString("en-US");
}

/** A count with its noun: "1 run", "2 runs", "1,250 runs" ("1 child", "3 children" with
 * `nouns`). */
export function plural(n, noun, nouns = `${noun}s`) {
  return `${count(n)} ${Number(n) === 1 ? noun : nouns}`;
}

/** A failure ratio with three decimals; "—" before any run finished. */
export function ratio(value) {
  return value === null || value === undefined ? "—" : Number(value).toFixed(3);
}

/** The whole document, as people read a JSON pointer: the CLI's `(document)` (its
 * api/cli/problem_text.py). In RFC 6901 "/" is the member named "", not the root, and an
 * empty pointer is one nobody would see. */
export const ROOT_POINTER = "(document)";

/** A JSON pointer for people: as written, but the whole document's "" as `ROOT_POINTER`. */
export function pointerText(pointer) {
  return pointer || ROOT_POINTER;
}

export function percent(part, whole) {
  if (!whole) return 0;
  return (100 * part) / whole;
}

const CLOSERS = { "(": ")", "[": "]", "{": "}" };

/** The closing brackets, innermost first, of those `text` opens and leaves open (outside
 * backticks: a quoted command is not prose). */
function unclosed(text) {
  const expected = [];
  let quoted = false;
  for (const char of text) {
    if (char === "`") quoted = !quoted;
    else if (quoted) continue;
    else if (CLOSERS[char]) expected.push(CLOSERS[char]);
    else if (expected.length && char === expected[expected.length - 1]) expected.pop();
  }
  return expected.reverse().join("");
}

/** The first line of `text`, cut to `max` characters. A bracket the cut leaves open is closed
 * after the "…" ("(3 http_error, e.g. POST …)"), as the CLI's lines cut it
 * (schemas/message_excerpt.py): the line still reads as a sentence. */
export function oneLine(text, max = 140) {
  const first = String(text ?? "").split("\n", 1)[0].trim();
  if (first.length <= max) return first;
  for (let room = max - 1; ; ) {
    const cut = first.slice(0, Math.max(room, 0)).trimEnd();
    const closers = unclosed(cut);
    if (cut.length + 1 + closers.length <= max || room <= 0) return `${cut}…${closers}`;
    room = Math.min(room - 1, max - 1 - closers.length);
  }
}

/** A run's or step's error as one line: "http_error · HTTP 422 · payee account closed". */
export function errorSummary(error) {
  if (!error) return "";
  const parts = [error.kind];
  if (error.vertexId) parts.push(`at ${error.vertexId}`);
  if (error.httpStatus) parts.push(`HTTP ${error.httpStatus}`);
  if (error.message) parts.push(error.message);
  return oneLine(parts.join(" · "));
}

/** Parts of a name longer than this break anywhere (a hash, a name without separators):
 * they would otherwise push the other columns of a list off a phone's screen. */
const LONG_PART = 20;

/** A name (a workflow's, a service's) as a span a line may break in only after a "-", "_" or
 * "." (a `<wbr>` there: a browser breaks at none of them by itself after an underscore or a
 * dot, nor after a hyphen before a digit), never inside a word. Each part is a span of its
 * own: on the smallest phones a part wider than its column ends in an ellipsis rather than
 * break ("fan-ou" / "t"), the whole name in the span's title (style.css); elsewhere a part
 * longer than `LONG_PART` characters (`.long-part`) may break anywhere. The text is
 * unchanged: copied, it has no extra characters. */
export function breakable(name) {
  const nodes = [];
  String(name)
    .split(/(?<=[-_.])/)
    .forEach((part, index) => {
      if (index) nodes.push(h("wbr"));
      nodes.push(h("span", { class: ["name-part", part.length > LONG_PART ? "long-part" : null] }, part));
    });
  return h("span", { class: "name", title: String(name) }, nodes);
}

export function shortId(id) {
  return String(id).slice(0, 8);
}

/** What was started over, in the words the runs list and the run page share: the run itself
 * ("started over as run 1a2b3c4d") or, for a child under a root run an operator started over,
 * its root ("its root run was started over as run 1a2b3c4d"). `shown` is the new run's id as
 * the caller shows it (whole in a title, short in a sentence). */
export function startedOverWords(own, shown) {
  return {
    label: own ? "started over" : "root started over",
    sentence: `${own ? "started over" : "its root run was started over"} as run ${shown}`,
  };
}
