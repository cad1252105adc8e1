// The waterfall of a run's steps: one row per step from its start to its end (or now), each
// HTTP attempt drawn inside it from the attempt's log line (its end and duration), so retries
// and the gaps of redispatches show; a step still waiting shows until when.

import { h, s } from "../dom.js";
import { duration, exact, plural, statusIcon, statusWord } from "../format.js";

const ROW = 26;
const LABEL = 150;
const WIDTH = 900;

export function timeline(detail, nowS = Date.now() / 1000) {
  const steps = detail.steps.filter((step) => step.startedAt !== null && step.startedAt !== undefined);
  if (!steps.length) return h("p", { class: "muted" }, "No step has started yet.");
  const start = Math.min(detail.createdAt, ...steps.map((step) => step.startedAt));
  const end = Math.max(...steps.map((step) => step.endedAt ?? nowS), detail.endedAt ?? 0, start + 0.001);
  const span = end - start;
  const plot = WIDTH - LABEL - 10;
  const x = (t) => LABEL + (plot * (t - start)) / span;
  const svg = s("svg", {
    class: "timeline",
    viewBox: `0 0 ${WIDTH} ${steps.length * ROW + 24}`,
    role: "img",
    "aria-label": `Timeline of ${plural(steps.length, "step")} over ${duration(span)}`,
  });
  steps.forEach((step, i) => {
    const y = i * ROW + 4;
    const status = step.status.toLowerCase();
    const stepEnd = step.endedAt ?? nowS;
    const label = `${statusIcon(step.status)} ${step.vertexId}`;
    // A long id is shortened to fit beside the bars; its tooltip names it whole.
    const shown = label.length > 22 ? `${label.slice(0, 21)}…` : label;
    svg.append(s("text", { x: 4, y: y + 15, class: "tl-label" }, shown, shown === label ? null : s("title", {}, step.vertexId)));
    const bar = s("rect", {
      x: x(step.startedAt),
      y: y + 4,
      width: Math.max(2, x(stepEnd) - x(step.startedAt)),
      height: 14,
      rx: 2,
      class: `tl-bar st-${status}`,
    });
    bar.append(
      s(
        "title",
        {},
        `${step.vertexId}: ${statusWord(step.status)}, ${duration(stepEnd - step.startedAt)} (${exact(step.startedAt)} → ${step.endedAt ? exact(step.endedAt) : "now"})`,
      ),
    );
    svg.append(bar);
    for (const attempt of step.history || []) {
      const took = (attempt.durationMs ?? 0) / 1000;
      const a0 = x(Math.max(step.startedAt, attempt.at - took));
      const a1 = x(attempt.at);
      const mark = s("rect", {
        x: a0,
        y: y + 7,
        width: Math.max(2, a1 - a0),
        height: 8,
        class: attempt.error || (attempt.httpStatus && attempt.httpStatus >= 400) || attempt.refused ? "tl-attempt bad" : "tl-attempt",
      });
      const what = attempt.refused ? `refused (${attempt.refused})` : attempt.httpStatus ? `HTTP ${attempt.httpStatus}` : attempt.error || "";
      mark.append(s("title", {}, `execution ${attempt.execution}, attempt ${attempt.attempt}: ${what} ${took ? `in ${duration(took)}` : ""} at ${exact(attempt.at)}`));
      svg.append(mark);
    }
    if (step.notBefore && step.notBefore > nowS && ["READY", "PARKED"].includes(step.status)) {
      svg.append(s("line", { x1: x(nowS), x2: Math.min(WIDTH - 4, x(nowS) + 30), y1: y + 11, y2: y + 11, class: "tl-wait" }));
    }
  });
  const axis = steps.length * ROW + 16;
  svg.append(s("text", { x: LABEL, y: axis, class: "tl-axis" }, exact(start).slice(11)));
  svg.append(s("text", { x: WIDTH - 10, y: axis, class: "tl-axis", "text-anchor": "end" }, `+${duration(span)}`));
  return h("div", { class: "timeline-wrap" }, svg);
}
