// The waterfall of a run's steps: one row per step from its start to its end (or now), each
// HTTP attempt drawn inside it from the attempt's log line (its end and duration), so retries
// and the gaps of redispatches show; a step still waiting shows until when.
//
// It is drawn three times, and style.css shows one: on a desktop each step's label is beside
// its bar; on a tablet (up to 900 px) too, in a narrower drawing scaled to its box; on a phone
// (style.css, 'phones') the narrowest drawing puts the label above the bar, so each keeps to
// the screen, at a readable size, without scrolling sideways.

import { h, s } from "../dom.js";
import { duration, exact, exactZoned, plural, statusIcon, statusWord, zoneName } from "../format.js";
import { RESOLVED_WORDS, shownStatus } from "../waits.js";

/** Where a drawing puts things: its width, where the bars start, a row's height, a label's
 * longest length and the top of its text and of its bar within the row. */
const WIDE = { name: "wide", width: 900, left: 150, row: 26, chars: 22, text: 15, bar: 4 };
const MEDIUM = { ...WIDE, name: "medium", width: 640 };
const NARROW = { name: "narrow", width: 380, left: 4, row: 38, chars: 48, text: 13, bar: 18 };

export function timeline(detail, nowS = Date.now() / 1000) {
  const steps = detail.steps.filter((step) => step.startedAt !== null && step.startedAt !== undefined);
  if (!steps.length) return h("p", { class: "muted" }, "No step has started yet.");
  return h("div", { class: "timeline-wrap" }, ...[WIDE, MEDIUM, NARROW].map((at) => draw(detail, steps, nowS, at)));
}

function draw(detail, steps, nowS, at) {
  const start = Math.min(detail.createdAt, ...steps.map((step) => step.startedAt));
  const end = Math.max(...steps.map((step) => step.endedAt ?? nowS), detail.endedAt ?? 0, start + 0.001);
  const span = end - start;
  const plot = at.width - at.left - 10;
  const x = (t) => at.left + (plot * (t - start)) / span;
  const svg = s("svg", {
    class: `timeline timeline-${at.name}`,
    viewBox: `0 0 ${at.width} ${steps.length * at.row + 24}`,
    role: "img",
    "aria-label": `Timeline of ${plural(steps.length, "step")} over ${duration(span)}`,
  });
  steps.forEach((step, i) => {
    const y = i * at.row + 4;
    const display = shownStatus(step);
    const status = display.toLowerCase();
    const stepEnd = step.endedAt ?? nowS;
    const label = `${statusIcon(display)} ${step.vertexId}`;
    // A long id is shortened to fit beside (or above) the bars; its tooltip names it whole.
    const shown = label.length > at.chars ? `${label.slice(0, at.chars - 1)}…` : label;
    svg.append(s("text", { x: 4, y: y + at.text, class: "tl-label" }, shown, shown === label ? null : s("title", {}, step.vertexId)));
    // A RESOLVED step's span is mostly the wait for the operator: a mark where it was
    // resolved, not a bar as long as that wait.
    const resolved = step.status === "RESOLVED" && step.endedAt;
    const bar = s("rect", {
      x: resolved ? x(stepEnd) - 1 : x(step.startedAt),
      y: y + at.bar,
      width: resolved ? 2 : Math.max(2, x(stepEnd) - x(step.startedAt)),
      height: 14,
      rx: 2,
      class: `tl-bar st-${status}`,
    });
    bar.append(
      s(
        "title",
        {},
        resolved
          ? `${step.vertexId}: ${RESOLVED_WORDS} at ${exactZoned(step.endedAt)}`
          : `${step.vertexId}: ${statusWord(display)}, ${duration(stepEnd - step.startedAt)} (${exactZoned(step.startedAt)} → ${step.endedAt ? exactZoned(step.endedAt) : "now"})`,
      ),
    );
    svg.append(bar);
    for (const attempt of step.history || []) {
      const took = (attempt.durationMs ?? 0) / 1000;
      const a0 = x(Math.max(step.startedAt, attempt.at - took));
      const a1 = x(attempt.at);
      const mark = s("rect", {
        x: a0,
        y: y + at.bar + 3,
        width: Math.max(2, a1 - a0),
        height: 8,
        class: attempt.lost || attempt.error || (attempt.httpStatus && attempt.httpStatus >= 400) || attempt.refused ? "tl-attempt bad" : "tl-attempt",
      });
      const what = attempt.lost ? `lost (${attempt.lost.replace("_", " ")}), no status read` : attempt.refused ? `refused (${attempt.refused})` : attempt.httpStatus ? `HTTP ${attempt.httpStatus}` : attempt.error || "";
      mark.append(s("title", {}, `execution ${attempt.execution}, attempt ${attempt.attempt}: ${what} ${took ? `in ${duration(took)}` : ""} at ${exactZoned(attempt.at)}`));
      svg.append(mark);
    }
    if (step.notBefore && step.notBefore > nowS && ["READY", "PARKED"].includes(step.status)) {
      const y1 = y + at.bar + 7;
      svg.append(s("line", { x1: x(nowS), x2: Math.min(at.width - 4, x(nowS) + 30), y1, y2: y1, class: "tl-wait" }));
    }
  });
  const axis = steps.length * at.row + 16;
  // The clock time the timeline starts at, with its zone, as the log's heading names it: a
  // bare "21:52:13.504" read as UTC or as local.
  svg.append(s("text", { x: at.left, y: axis, class: "tl-axis tl-start" }, `${exact(start).slice(11)} ${zoneName(start)}`.trim()));
  svg.append(s("text", { x: at.width - 10, y: axis, class: "tl-axis", "text-anchor": "end" }, `+${duration(span)}`));
  return svg;
}
