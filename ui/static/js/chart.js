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

/** The chart's vertical scale: `top`, the value its top stands for, and whether the cap (as
 * it is now) is drawn as a line in it. Scaled to the lines drawn — the samples' limit and in
 * flight, and a cap lowered from 100 to 10 does not keep the axis at 100 — and to the cap as
 * well while it is near them; a cap far above (the default 100 over limits of 1 to 14) would
 * flatten them along the bottom, so it is said in words instead (`capAbove`). `capNow`: the
 * destination's cap as the page read it, else the latest sample's. The samples come every
 * few seconds: a cap just set from 100 to 4 was said "cap 100 above" until the next one. */
export function chartScale(points, capNow = null) {
  const peak = Math.max(1, ...points.map((p) => Math.max(p.limit, p.inFlight)));
  const cap = capNow ?? (points.length ? points[points.length - 1].cap : 0);
  if (cap <= CAP_SHOWN_UP_TO * peak) return { top: Math.max(peak, cap), capAbove: null };
  return { top: Math.ceil(peak * HEADROOM), capAbove: cap };
}

/** How far above the lines' peak the cap may be and still be drawn (times the peak). */
const CAP_SHOWN_UP_TO = 2;
/** Room above the peak when the scale is the lines' own. */
const HEADROOM = 1.2;
/** The bottom strip kept for the time label, clear of the lines. */
const AXIS_H = 11;

/** The chart of `series` over `windowS` seconds up to `nowS`, its cap line at `capNow` (the
 * destination's cap now; null: the latest sample's). */
export function historyChart(series, windowS, nowS = Date.now() / 1000, capNow = null) {
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
  const { top, capAbove } = chartScale(points, capNow);
  // The span shown: from the first sample (at least the last minute) up to the whole window.
  const span = Math.min(windowS, Math.max(60, nowS - points[0].at));
  const start = nowS - span;
  const x = (t) => PAD + ((W - 2 * PAD) * (t - start)) / span;
  const y = (v) => H - PAD - AXIS_H - ((H - 2 * PAD - AXIS_H - 10) * v) / top;
  if (capAbove === null) {
    const capY = y(capNow ?? points[points.length - 1].cap);
    svg.append(s("line", { x1: PAD, x2: W - PAD, y1: capY, y2: capY, class: "chart-cap" }));
  } else {
    svg.append(s("text", { x: W - PAD, y: 10, "text-anchor": "end", class: "chart-axis chart-cap-above" }, `cap ${capAbove.toFixed(0)} above`));
  }
  svg.append(s("path", { d: line(points, x, y, "inFlight"), class: "chart-inflight" }));
  svg.append(s("path", { d: line(points, x, y, "limit"), class: "chart-limit" }));
  svg.append(s("text", { x: PAD + 2, y: 10, class: "chart-axis" }, `${top.toFixed(0)}`));
  svg.append(s("text", { x: W - PAD, y: H - 2, "text-anchor": "end", class: "chart-axis" }, exact(nowS).slice(11, 19)));
  return svg;
}
