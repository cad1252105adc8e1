// A SPAWNER's fan-out: the bar of succeeded / failed / cancelled / running / waiting children
// with the counts in words, and its long tail (child duration p50 / p95 / p99, the slowest
// children and the unfinished ones that started first, each linked to its run and saying
// whether it runs or waits, as the bar counts it), and under the bar which running children a
// worker presumed dead holds, until when.

import { api } from "../api.js";
import { fill, h, widthPercent } from "../dom.js";
import { count, duration, liveDuration, percent, plural, shortId, statusIcon, statusWord, time } from "../format.js";
import { fanoutLegend, fanoutSegments } from "../graph.js";
import { longTailHeading } from "../waits.js";
import { withCode } from "../warnings.js";
import { clockTime, START_ONE } from "./errors.js";

/** The bar of a spawner's children and its legend; `groups` and `dead` (the API's
 * `fanout.waiting` and `fanout.presumedDead`, when they are this spawner's) say what holds
 * its running ones, and `dead` a line per dead worker under the legend (`heldChildrenLines`,
 * its silence counted on from `readAt`, when the page read it). */
export function fanoutBar(children, running, groups = [], dead = [], readAt = Date.now() / 1000) {
  const ended = children.succeeded + children.failed + children.cancelled;
  const share = percent(ended, children.total);
  const bar = h("div", {
    class: "fanout",
    role: "progressbar",
    "aria-label": "Children ended",
    "aria-valuemin": "0",
    "aria-valuemax": String(children.total),
    "aria-valuenow": String(ended),
    "aria-valuetext": `${count(ended)} of ${plural(children.total, "child", "children")} ended, ${count(children.failed)} failed`,
  });
  for (const [name, n] of fanoutSegments(children, running)) {
    if (n) bar.append(widthPercent(h("span", { class: `seg seg-${name}` }), percent(n, children.total)));
  }
  return h(
    "div",
    { class: "fanout-block" },
    h(
      "p",
      { class: "fanout-figures" },
      h("strong", { class: "fanout-percent" }, `${Math.floor(share)} %`),
      ` — ${count(ended)} of ${plural(children.total, "child", "children")} ended`,
    ),
    bar,
    fanoutLegend(children, running, groups, dead),
    heldChildrenLines(dead, readAt),
  );
}

/** A line per worker presumed dead that holds running children (`dead`: the API's
 * `fanout.presumedDead`), or null when none does: running in name only until their leases
 * end. Worded as `runs watch` words it (api/cli/fanout_words.py `held_children_line`). */
export function heldChildrenLines(dead, readAt, now = Date.now() / 1000) {
  if (!dead || !dead.length) return null;
  return h("div", { class: "held-children" }, dead.map((held) => heldChildrenLine(held, readAt, now)));
}

/** "37 running children held by worker w-2 (no heartbeat for 42 s: presumed dead); taken back
 * when their leases end, by 00:03:16" (the latest of their leases, local time). The silence
 * counts on from `readAt` (the page's clock), since a stream sends no event for it alone; a
 * tenant's key is not told the worker: "a worker". */
function heldChildrenLine(held, readAt, now) {
  const { holder, children, leaseExpiresAt } = held;
  const one = children === 1;
  const who = holder.worker ? `worker ${holder.worker}` : "a worker";
  const silentS = holder.silentS ?? null;
  const state = silentS === null ? ["presumed dead"] : ["no heartbeat for ", liveDuration(readAt - silentS, null, now), ": presumed dead"];
  const head = `${one ? "1 running child" : `${count(children)} running children`} held by ${who} (`;
  return h(
    "p",
    { class: "holder-line holder-presumed_dead held-children-line", "data-worker": holder.worker ?? "" },
    h("span", { "aria-hidden": "true" }, "⚠ "),
    head,
    ...state,
    ...withCode(`)${leaseWords(leaseExpiresAt, one, now)}`),
  );
}

/** When the dead holder's children are taken back: by the end of their leases, or, once those
 * have ended, by the next worker's claim. */
function leaseWords(leaseExpiresAt, one, now) {
  if (!leaseExpiresAt) return "";
  const ends = clockTime(leaseExpiresAt);
  if (leaseExpiresAt <= now) {
    const ended = one ? `its lease ended at ${ends}` : `their leases ended by ${ends}`;
    return `; ${ended}: the next worker to claim takes ${one ? "it" : "them"} back ${START_ONE}`;
  }
  return one ? `; taken back when its lease ends at ${ends}` : `; taken back when their leases end, by ${ends}`;
}

/** A child of the long tail. A running one's time is counted on from when the tail was read
 * (`readAt`, the page's clock) by a live page's ticks, not frozen at the read. */
function childLink(item, readAt = null) {
  const run = item.run;
  // A RUNNING child no worker holds a step of is "waiting", as in the bar and the table.
  const status = run.waiting ? "WAITING" : run.status;
  const going = run.status === "RUNNING" && readAt !== null;
  return h(
    "li",
    {},
    h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, `item ${run.itemIndex}`),
    ` ${statusIcon(status)} ${statusWord(status)} · `,
    going ? h("span", { class: "live-duration", "data-since": String(readAt - item.durationS) }, duration(item.durationS)) : duration(item.durationS),
    " ",
    h("span", { class: "mono muted" }, shortId(run.id)),
  );
}

/** Whether a long tail read earlier says of its children what the fan-out's live counts
 * (`fanout`, the run's progress read since) make impossible: a child held by a worker while
 * none is running now, or waiting while none waits; or more of either than there are. The
 * page then reads the tail again rather than show "running" beside "running 0". */
export function tailContradicts(tail, fanout) {
  if (!tail || !fanout) return false;
  const listed = tail.runningLongest.filter((item) => item.run.status === "RUNNING");
  const held = listed.filter((item) => item.run.waiting === false).length;
  const waiting = listed.filter((item) => item.run.waiting === true).length;
  return held > fanout.running || waiting > (fanout.waitingChildren ?? fanout.pending ?? 0);
}

export function longTailView(tail) {
  if (!tail) return h("p", { class: "muted" }, "Loading the long tail…");
  const stats = [
    ["p50", tail.p50S],
    ["p95", tail.p95S],
    ["p99", tail.p99S],
    ["max", tail.maxS],
  ];
  return h(
    "div",
    { class: "long-tail" },
    h("h3", {}, longTailHeading(tail)),
    // Read on its own, less often than the bar above moves: it says when, so its figures are
    // not read as contradicting the bar's.
    tail.readAt ? h("p", { class: "read-at muted" }, "Read ", time(tail.readAt), "; the bar above is live.") : null,
    tail.ended
      ? h("dl", { class: "stats" }, stats.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, duration(value)))))
      : h("p", { class: "muted" }, "No child has succeeded or failed yet."),
    h(
      "div",
      { class: "tail-lists" },
      h("div", {}, h("h4", {}, "Slowest children"), tail.slowest.length ? h("ol", { class: "slowest" }, tail.slowest.map((item) => childLink(item))) : h("p", { class: "muted" }, "None yet.")),
      h("div", {}, h("h4", {}, "Running or waiting longest"), tail.runningLongest.length ? h("ol", { class: "running-longest" }, tail.runningLongest.map((item) => childLink(item, tail.readAt ?? null))) : h("p", { class: "muted" }, "None running or waiting.")),
    ),
  );
}

/** The long tail of one spawner, stamped with when its answer came (`readAt`, epoch s). */
export async function fetchLongTail(runId, vertexId) {
  const tail = await api(`/runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(vertexId)}/long-tail?limit=5`);
  return { ...tail, readAt: Date.now() / 1000 };
}
