// A workflow's DAG as SVG, from the positions the graph endpoint computed (no layout here).
// Each vertex shows its id, its type, and — on a run — its step's status as an icon and a word
// (colour only repeats it), its attempts, and for a SPAWNER its fan-out as a bar of succeeded /
// failed / running / pending children: a fan-out of 100,000 is one bar, not 100,000 nodes.

import { h, s } from "./dom.js";
import { count, plural, statusIcon, statusWord } from "./format.js";

let graphs = 0;
const FANOUT_EXTRA = 22;
const MAX_LABEL = 24;

function cut(text, max = MAX_LABEL) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** The fan-out bar's segments, in drawing order: [name, count]. */
export function fanoutSegments(children, running = 0) {
  const ended = children.succeeded + children.failed + children.cancelled;
  const active = Math.max(0, Math.min(running, children.total - ended));
  return [
    ["succeeded", children.succeeded],
    ["failed", children.failed],
    ["cancelled", children.cancelled],
    ["running", active],
    ["pending", Math.max(0, children.total - ended - active)],
  ];
}

function fanoutBar(x, y, width, children, running) {
  const group = s("g", { class: "fanout-bar" });
  group.append(s("rect", { x, y, width, height: 7, class: "seg-track", rx: 2 }));
  let left = x;
  for (const [name, n] of fanoutSegments(children, running)) {
    if (!n || !children.total) continue;
    const w = (width * n) / children.total;
    group.append(s("rect", { x: left, y, width: Math.max(w, 0.5), height: 7, class: `seg-${name}` }));
    left += w;
  }
  return group;
}

function nodeLabel(node, step, problems) {
  const parts = [`${node.id}, ${node.type}`];
  if (step) parts.push(statusWord(step.status));
  if (step && step.attempts > 1) parts.push(plural(step.attempts, "attempt"));
  if (step && step.children) {
    const c = step.children;
    parts.push(`${count(c.succeeded)} of ${plural(c.total, "child", "children")} succeeded, ${count(c.failed)} failed`);
  }
  if (problems && problems.length) parts.push(plural(problems.length, "problem"));
  return parts.join("; ");
}

/**
 * `view`: a GraphView. Options: `steps` (Map vertex id → step view with status, attempts,
 * autoRetries, children), `running` (Map vertex id → children running), `problems` (Map vertex
 * id → problems), `selected` (a vertex id), `onSelect(vertexId)`.
 */
export function drawGraph(view, { steps = new Map(), running = new Map(), problems = new Map(), selected = null, onSelect = null } = {}) {
  const id = `g${++graphs}`;
  const w = view.nodeWidth;
  const hgt = view.nodeHeight;
  const hasFanout = view.nodes.some((n) => steps.get(n.id)?.children);
  const height = view.height + (hasFanout ? FANOUT_EXTRA : 0);
  const svg = s("svg", {
    class: "dag",
    viewBox: `0 0 ${view.width} ${height}`,
    role: "group",
    "aria-label": `Graph of ${view.name}: ${view.nodes.length} vertices`,
  });
  svg.style.maxWidth = `${Math.round(view.width * 1.35)}px`; // a little larger than laid out
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: `${id}-arrow`, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
        s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }),
      ),
    ),
  );
  const byId = new Map(view.nodes.map((n) => [n.id, n]));
  const bottom = (node) => node.y + hgt / 2 + (steps.get(node.id)?.children ? FANOUT_EXTRA : 0);
  for (const edge of view.edges) {
    const a = byId.get(edge.source);
    const b = byId.get(edge.target);
    if (!a || !b) continue;
    const y1 = bottom(a);
    const y2 = b.y - hgt / 2;
    const upward = y2 <= y1;
    const mid = (y1 + y2) / 2;
    const d = upward
      ? `M ${a.x + w / 2} ${a.y} C ${a.x + w / 2 + 40} ${a.y}, ${b.x + w / 2 + 40} ${b.y}, ${b.x + w / 2} ${b.y}`
      : `M ${a.x} ${y1} C ${a.x} ${mid}, ${b.x} ${mid}, ${b.x} ${y2 - 1}`;
    svg.append(s("path", { d, class: "edge", "marker-end": `url(#${id}-arrow)` }));
  }
  for (const node of view.nodes) {
    const step = steps.get(node.id);
    const found = problems.get(node.id) || [];
    const status = step ? step.status.toLowerCase() : "none";
    const x = node.x - w / 2;
    const y = node.y - hgt / 2;
    const tall = step && step.children ? FANOUT_EXTRA : 0;
    const group = s("g", {
      class: ["node", `st-${status}`, found.length && "has-problem", selected === node.id && "selected"],
      "data-vertex": node.id,
      tabindex: onSelect ? "0" : null,
      role: onSelect ? "button" : "img",
      "aria-label": nodeLabel(node, step, found),
    });
    group.append(s("title", {}, nodeLabel(node, step, found)));
    group.append(s("rect", { x, y, width: w, height: hgt + tall, rx: 6, class: "node-box" }));
    group.append(s("text", { x: x + 10, y: y + 20, class: "node-id" }, cut(node.id)));
    let second = node.type;
    if (node.workflow) second += ` → ${cut(node.workflow, 14)}`;
    group.append(s("text", { x: x + 10, y: y + 38, class: "node-type" }, second));
    if (step) {
      let line = `${statusIcon(step.status)} ${statusWord(step.status)}`;
      if (step.attempts > 1) line += ` · ×${step.attempts}`;
      if (step.autoRetries) line += ` · ↻${step.autoRetries}`;
      group.append(s("text", { x: x + w - 8, y: y + 20, class: "node-status", "text-anchor": "end" }, line));
    }
    if (step && step.children) {
      const c = step.children;
      group.append(fanoutBar(x + 10, y + hgt - 6, w - 20, c, running.get(node.id) || 0));
      group.append(s("text", { x: x + 10, y: y + hgt + 14, class: "node-fanout" }, `${count(c.succeeded + c.failed + c.cancelled)}/${count(c.total)}`));
      if (c.failed) {
        group.append(s("text", { x: x + w - 8, y: y + hgt + 14, class: "node-fanout-failed", "text-anchor": "end" }, `✕ ${count(c.failed)} failed`));
      }
    }
    if (found.length) {
      group.append(s("text", { x: x + w - 8, y: y + 38, class: "node-problem", "text-anchor": "end" }, `⚠ ${found.length}`));
    }
    if (onSelect) {
      group.addEventListener("click", () => onSelect(node.id));
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          onSelect(node.id);
        }
      });
    }
    svg.append(group);
  }
  return h("div", { class: "dag-wrap" }, svg);
}

/** The legend of the fan-out bar's colours (each also named in words). */
export function fanoutLegend(children, running = 0) {
  return h(
    "ul",
    { class: "legend" },
    fanoutSegments(children, running).map(([name, n]) =>
      h("li", {}, h("span", { class: `swatch seg-${name}`, "aria-hidden": "true" }), `${name} ${count(n)}`),
    ),
  );
}
