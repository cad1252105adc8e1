// A workflow's DAG as SVG, from the positions the graph endpoint computed (no layout here, but
// for one stretch: on a run, nodes are taller, and each layer moves down by the extra height of
// the layers above it). Each vertex shows its id, its type, and — on a run, on a line of its
// own — its step's status as an icon and a word (colour only repeats it), its attempts, and for
// a SPAWNER its fan-out as a bar of succeeded / failed / running / pending children: a fan-out
// of 100,000 is one bar, not 100,000 nodes. A text too long for its node is cut to fit with an
// ellipsis; the node's tooltip and accessible name keep it whole.

import { h, s } from "./dom.js";
import { count, plural, statusIcon, statusWord } from "./format.js";

let graphs = 0;
const FANOUT_EXTRA = 22;
const LINE = 18; // from one baseline to the next
const STATUS_EXTRA = LINE; // a run's status line, under the type
const PAD = 10; // inside a node, left and right
const GAP = 8; // between two texts on one line
// The texts' weight and size, as style.css's `.dag` rules set them (the family is the page's).
const FONT = { id: "700 13px", small: "400 11.5px", status: "600 11.5px", strong: "700 11.5px" };

let measure = null;
let family = "sans-serif"; // the page's, read once per drawing

/** How wide `text` is drawn in `font` (one of FONT), in the SVG's units. */
function textWidth(text, font) {
  measure ??= document.createElement("canvas").getContext("2d");
  measure.font = `${font} ${family}`;
  return measure.measureText(text).width;
}

/** `text`, or its longest start that fits `room` with an ellipsis. */
function fit(text, room, font) {
  if (textWidth(text, font) <= room) return text;
  let lo = 0;
  let hi = text.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (textWidth(`${text.slice(0, mid)}…`, font) <= room) lo = mid;
    else hi = mid - 1;
  }
  return `${text.slice(0, lo)}…`;
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
  family = getComputedStyle(document.body).fontFamily || family;
  const w = view.nodeWidth;
  const hgt = view.nodeHeight;
  // How much taller than laid out a node is drawn, and how far down each layer moves for it.
  const extra = (node) => {
    const step = steps.get(node.id);
    return step ? STATUS_EXTRA + (step.children ? FANOUT_EXTRA : 0) : 0;
  };
  const layers = [...new Set(view.nodes.map((n) => n.y))].sort((a, b) => a - b);
  const shift = new Map();
  let stretch = 0;
  for (const layer of layers) {
    shift.set(layer, stretch);
    stretch += Math.max(...view.nodes.filter((n) => n.y === layer).map(extra));
  }
  const top = (node) => node.y + shift.get(node.y) - hgt / 2;
  const height = view.height + stretch;
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
  const middle = (node) => top(node) + (hgt + extra(node)) / 2;
  for (const edge of view.edges) {
    const a = byId.get(edge.source);
    const b = byId.get(edge.target);
    if (!a || !b) continue;
    const y1 = top(a) + hgt + extra(a);
    const y2 = top(b);
    const upward = y2 <= y1;
    const mid = (y1 + y2) / 2;
    const [ya, yb] = [middle(a), middle(b)];
    const d = upward
      ? `M ${a.x + w / 2} ${ya} C ${a.x + w / 2 + 40} ${ya}, ${b.x + w / 2 + 40} ${yb}, ${b.x + w / 2} ${yb}`
      : `M ${a.x} ${y1} C ${a.x} ${mid}, ${b.x} ${mid}, ${b.x} ${y2 - 1}`;
    svg.append(s("path", { d, class: "edge", "marker-end": `url(#${id}-arrow)` }));
  }
  for (const node of view.nodes) {
    const step = steps.get(node.id);
    const found = problems.get(node.id) || [];
    const status = step ? step.status.toLowerCase() : "none";
    const x = node.x - w / 2;
    const y = top(node);
    const room = w - 2 * PAD;
    const group = s("g", {
      class: ["node", `st-${status}`, found.length && "has-problem", selected === node.id && "selected"],
      "data-vertex": node.id,
      tabindex: onSelect ? "0" : null,
      role: onSelect ? "button" : "img",
      "aria-label": nodeLabel(node, step, found),
    });
    group.append(s("title", {}, nodeLabel(node, step, found)));
    group.append(s("rect", { x, y, width: w, height: hgt + extra(node), rx: 6, class: "node-box" }));
    group.append(s("text", { x: x + PAD, y: y + 20, class: "node-id" }, fit(node.id, room, FONT.id)));
    let second = node.type;
    if (node.workflow) second += ` → ${node.workflow}`;
    let secondRoom = room;
    if (found.length) {
      const mark = `⚠ ${found.length}`;
      secondRoom -= textWidth(mark, FONT.strong) + GAP;
      group.append(s("text", { x: x + w - PAD, y: y + 20 + LINE, class: "node-problem", "text-anchor": "end" }, mark));
    }
    group.append(s("text", { x: x + PAD, y: y + 20 + LINE, class: "node-type" }, fit(second, secondRoom, FONT.small)));
    if (step) {
      let line = `${statusIcon(step.status)} ${statusWord(step.status)}`;
      if (step.attempts > 1) line += ` · ×${step.attempts}`;
      if (step.autoRetries) line += ` · ↻${step.autoRetries}`;
      group.append(s("text", { x: x + PAD, y: y + 20 + 2 * LINE, class: "node-status" }, fit(line, room, FONT.status)));
    }
    if (step && step.children) {
      const c = step.children;
      const below = y + hgt + STATUS_EXTRA; // the fan-out's bar and counts, under the status
      const done = `${count(c.succeeded + c.failed + c.cancelled)}/${count(c.total)}`;
      group.append(fanoutBar(x + PAD, below - 6, room, c, running.get(node.id) || 0));
      group.append(s("text", { x: x + PAD, y: below + 14, class: "node-fanout" }, done));
      if (c.failed) {
        const failedRoom = room - textWidth(done, FONT.small) - GAP;
        group.append(s("text", { x: x + w - PAD, y: below + 14, class: "node-fanout-failed", "text-anchor": "end" }, fit(`✕ ${count(c.failed)} failed`, failedRoom, FONT.strong)));
      }
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
