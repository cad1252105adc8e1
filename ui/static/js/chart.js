// A small line chart of one destination's AIMD limit and calls in flight over the last
// minutes (and its cap as a dashed line), drawn as SVG.

import { s } from "./dom.js";
import { exact } from "./format.js";

const W = 320;
const H = 90;
const PAD = 4;

function line(points, x, y, key) {
  return points.map((p, i) => `${i ? "L" : "M"} ${x(p.at).toFixed(1)} ${y(p[key]).toFixed(1)}`).join(" ");
}

export function historyChart(series, windowS, nowS = Date.now() / 1000) {
  const points = series ? series.points : [];
  const label = points.length
    ? `limit and in flight over the last minutes: limit now ${points[points.length - 1].limit.toFixed(1)}, in flight ${points[points.length - 1].inFlight}`
    : "no samples yet";
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
  svg.append(s("title", {}, label));
  if (!points.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "collecting samples…"));
    return svg;
  }
  // Scaled to the lines drawn: the samples' limit and in flight, and the cap as it is now
  // (the one dashed line); a cap lowered from 100 to 10 does not keep the axis at 100.
  const top = Math.max(1, points[points.length - 1].cap, ...points.map((p) => Math.max(p.limit, p.inFlight)));
  // The span shown: from the first sample (at least the last minute) up to the whole window.
  const span = Math.min(windowS, Math.max(60, nowS - points[0].at));
  const start = nowS - span;
  const x = (t) => PAD + ((W - 2 * PAD) * (t - start)) / span;
  const y = (v) => H - PAD - ((H - 2 * PAD - 10) * v) / top;
  svg.append(s("line", { x1: PAD, x2: W - PAD, y1: y(points[points.length - 1].cap), y2: y(points[points.length - 1].cap), class: "chart-cap" }));
  svg.append(s("path", { d: line(points, x, y, "inFlight"), class: "chart-inflight" }));
  svg.append(s("path", { d: line(points, x, y, "limit"), class: "chart-limit" }));
  svg.append(s("text", { x: PAD + 2, y: 10, class: "chart-axis" }, `${top.toFixed(0)}`));
  svg.append(s("text", { x: W - PAD, y: H - 2, "text-anchor": "end", class: "chart-axis" }, exact(nowS).slice(11, 19)));
  return svg;
}
