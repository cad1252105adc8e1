// A SPAWNER's fan-out: the bar of succeeded / failed / cancelled / running / waiting children
// with the counts in words, and its long tail (child duration p50 / p95 / p99, the slowest
// children and those running longest, each linked to its run).

import { api } from "../api.js";
import { fill, h, widthPercent } from "../dom.js";
import { count, duration, percent, plural, shortId, statusIcon, statusWord } from "../format.js";
import { fanoutLegend, fanoutSegments } from "../graph.js";
import { longTailHeading } from "../waits.js";

export function fanoutBar(children, running, groups = []) {
  const ended = children.succeeded + children.failed + children.cancelled;
  const share = percent(ended, children.total);
  const bar = h("div", {
    class: "fanout",
    role: "progressbar",
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
    fanoutLegend(children, running, groups),
  );
}

function childLink(item) {
  const run = item.run;
  // A RUNNING child no worker holds a step of is "waiting", as in the bar and the table.
  const status = run.waiting ? "WAITING" : run.status;
  return h(
    "li",
    {},
    h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, `item ${run.itemIndex}`),
    ` ${statusIcon(status)} ${statusWord(status)} · ${duration(item.durationS)} `,
    h("span", { class: "mono muted" }, shortId(run.id)),
  );
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
    h("h4", {}, longTailHeading(tail)),
    tail.ended
      ? h("dl", { class: "stats" }, stats.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, duration(value)))))
      : h("p", { class: "muted" }, "No child has succeeded or failed yet."),
    h(
      "div",
      { class: "tail-lists" },
      h("div", {}, h("h5", {}, "Slowest children"), tail.slowest.length ? h("ol", { class: "slowest" }, tail.slowest.map(childLink)) : h("p", { class: "muted" }, "None yet.")),
      h("div", {}, h("h5", {}, "Running longest"), tail.runningLongest.length ? h("ol", { class: "running-longest" }, tail.runningLongest.map(childLink)) : h("p", { class: "muted" }, "None running.")),
    ),
  );
}

export function fetchLongTail(runId, vertexId) {
  return api(`/runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(vertexId)}/long-tail?limit=5`);
}
