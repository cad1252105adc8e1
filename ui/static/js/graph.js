// A workflow's DAG as SVG, from the positions the graph endpoint computed (no layout here, but
// for one stretch: on a run, nodes are taller, and each layer moves down by the extra height of
// the layers above it). Each vertex shows its id, its type, and — on a run, on a line of its
// own — its step's status as an icon and a word (colour only repeats it), its attempts, and for
// a SPAWNER its fan-out as a bar of succeeded / failed / running / waiting children: a fan-out
// of 100,000 is one bar, not 100,000 nodes. Given the room the drawing has, nodes are drawn
// wider than laid out (up to MAX_NODE) where their texts need it and the room allows, at the
// same scale; a text still too long for its node is cut to fit with an ellipsis, and both the
// cut text's tooltip and the node's accessible name keep it whole.

import { h, s } from "./dom.js";
import { count, plural, statusIcon, statusWord } from "./format.js";
import { heldNote, shownStatus, stageOutcome } from "./waits.js";

let graphs = 0;
const FANOUT_EXTRA = 22;
const LINE = 18; // from one baseline to the next
const STATUS_EXTRA = LINE; // a run's status line, under the type
const PAD = 10; // inside a node, left and right
const GAP = 8; // between two texts on one line
// The texts' weight and size, as style.css's `.dag` rules set them (the family is the page's).
const FONT = { id: "700 13px", small: "400 11.5px", status: "600 11.5px", strong: "700 11.5px" };
const MAX_NODE = 340; // the widest a node is drawn to show its texts whole
const SCALE = 1.35; // how much larger than laid out the drawing may show

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

/** A `text` element of `text` cut to `room`; cut, its tooltip (a <title>) keeps it whole. */
function fitted(attrs, text, room, font) {
  const shown = fit(text, room, font);
  return s("text", attrs, shown, shown === text ? null : s("title", {}, text));
}

/** A node's second line: its type, and a SPAWNER's child workflow. */
function typeLine(node) {
  return node.workflow ? `${node.type} → ${node.workflow}` : node.type;
}

/** The status line of a step on a run. */
function statusLine(step) {
  const status = shownStatus(step);
  let line = `${statusIcon(status)} ${statusWord(status)}`;
  if (step.attempts > 1) line += ` · ×${step.attempts}`;
  if (step.autoRetries) line += ` · ↻${step.autoRetries}`;
  const outcome = stageOutcome(step);
  if (outcome) line += ` · ${outcome.short}`;
  return line;
}

/** The mark of a node's problems, if any. */
const problemMark = (found) => (found.length ? `⚠ ${found.length}` : null);

/**
 * How wide to draw the nodes, and where (x of each node's centre): as laid out, or wider when
 * a node's texts need it and `room` (the CSS pixels the drawing has) shows the wider drawing
 * at the same scale (SCALE). Each layer stays centred; its nodes keep their gaps.
 */
function widened(view, steps, problems, room) {
  const w = view.nodeWidth;
  const laidOut = { w, width: view.width, x: new Map(view.nodes.map((n) => [n.id, n.x])) };
  if (!room) return laidOut;
  const layers = new Map();
  for (const node of view.nodes) layers.set(node.y, [...(layers.get(node.y) || []), node.x].sort((a, b) => a - b));
  const rows = [...layers.values()];
  const widest = Math.max(1, ...rows.map((row) => row.length));
  const pitch = Math.min(Infinity, ...rows.flatMap((row) => row.slice(1).map((x, i) => x - row[i])));
  const needed = Math.max(
    ...view.nodes.map((node) => {
      const step = steps.get(node.id);
      const mark = problemMark(problems.get(node.id) || []);
      return Math.max(
        textWidth(node.id, FONT.id),
        textWidth(typeLine(node), FONT.small) + (mark ? textWidth(mark, FONT.strong) + GAP : 0),
        step ? textWidth(statusLine(step), FONT.status) : 0,
        step && step.children ? fanoutLineWidth(step.children) : 0,
      );
    }),
  ) + 2 * PAD + 1;
  const wide = Math.min(needed, MAX_NODE, w + (room / SCALE - view.width) / widest);
  if (wide <= w) return laidOut;
  const width = view.width + widest * (wide - w);
  const spread = Number.isFinite(pitch) ? (pitch + wide - w) / pitch : 1;
  return { w: wide, width, x: new Map(view.nodes.map((n) => [n.id, width / 2 + (n.x - view.width / 2) * spread])) };
}

/** The texts under a fan-out's bar: its children ended of all ("18,816/20,000") and what
 * did not succeed ("✕ 378 failed", else "⊘ 12 cancelled"), as [done, note, kind]. */
function fanoutTexts(c) {
  const done = `${count(c.succeeded + c.failed + c.cancelled)}/${count(c.total)}`;
  const [note, kind] = c.failed ? [`✕ ${count(c.failed)} failed`, "failed"] : c.cancelled ? [`⊘ ${count(c.cancelled)} cancelled`, "cancelled"] : [];
  return [done, note, kind];
}

/** How wide a fan-out's line under its bar can get over the run's life: every child ended and
 * all of them failed or cancelled, so the node is drawn as wide at the first child as at the
 * last (its width does not jump as the counts grow) and the note is never cut to "✕ 378 fa…"
 * where the drawing has room. */
function fanoutLineWidth(c) {
  const [done] = fanoutTexts({ succeeded: c.total, failed: 0, cancelled: 0, total: c.total });
  const notes = [fanoutTexts({ ...c, failed: c.total })[1], fanoutTexts({ ...c, failed: 0, cancelled: c.total })[1]];
  return textWidth(done, FONT.small) + GAP + Math.max(...notes.map((note) => textWidth(note, FONT.strong)));
}

/** An edge between layers: from the bottom of `a` (at `y1`) to the top of `b` (at `y2`). */
function downwards(a, b, y1, y2) {
  const mid = (y1 + y2) / 2;
  return `M ${a.x} ${y1} C ${a.x} ${mid}, ${b.x} ${mid}, ${b.x} ${y2 - 1}`;
}

/** How far an edge inside a layer bows out of it: 3/4 of this at its peak, which stays in
 * the margin the layout leaves above the first layer and below the last. */
const BOW = 26;

/**
 * An edge inside one layer (only a draft's cycle puts both ends of an edge in a layer: its
 * vertices share one). Drawn straight from side to side it would run through the nodes
 * between, and an edge back along the same line would hide behind its ends. So an edge to the
 * right bows over the layer, from the top of `a` to the top of `b`, and one to the left bows
 * under it, bottom to bottom: a two-vertex cycle is a loop. Each end is a quarter of the node
 * off its centre, apart from the centre where edges from other layers meet it.
 */
function sideways(a, b, top, height, w) {
  const right = b.x > a.x ? 1 : -1;
  const [x1, x2] = [a.x + (right * w) / 4, b.x - (right * w) / 4];
  const [y1, y2] = right > 0 ? [top(a), top(b)] : [top(a) + height, top(b) + height];
  const bow = right > 0 ? -BOW : BOW;
  return `M ${x1} ${y1} C ${x1} ${y1 + bow}, ${x2} ${y2 + bow}, ${x2} ${y2}`;
}

/**
 * Each vertex of `view` that is on a cycle → every vertex of its cycle (its strongly connected
 * component of more than one vertex, found by Tarjan's algorithm); empty on a DAG. A draft's
 * cycle problem names one of its vertices; none of them can ever start, so each is marked.
 */
export function cycleMembers(view) {
  const next = new Map(view.nodes.map((n) => [n.id, []]));
  for (const edge of view.edges) if (next.has(edge.source) && next.has(edge.target)) next.get(edge.source).push(edge.target);
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const members = new Map();
  const visit = (v) => {
    index.set(v, index.size);
    low.set(v, index.get(v));
    stack.push(v);
    onStack.add(v);
    for (const u of next.get(v)) {
      if (!index.has(u)) {
        visit(u);
        low.set(v, Math.min(low.get(v), low.get(u)));
      } else if (onStack.has(u)) low.set(v, Math.min(low.get(v), index.get(u)));
    }
    if (low.get(v) !== index.get(v)) return;
    const component = [];
    let u;
    do {
      u = stack.pop();
      onStack.delete(u);
      component.push(u);
    } while (u !== v);
    if (component.length > 1) for (const member of component) members.set(member, component);
  };
  // A sketch has at most 500 vertices: recursion that deep is safe.
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return members;
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
    // Not started or between attempts: the API's `waitingChildren` (no child run is PENDING).
    ["waiting", Math.max(0, children.total - ended - active)],
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
  // First the lines the node shows, as drawn: a name that holds what is seen is the one a
  // voice-control user can say to press it (WCAG 2.5.3); then the same in words.
  const shown = [node.id, typeLine(node)];
  if (step) shown.push(statusLine(step));
  const parts = [shown.join(" ")];
  if (step && stageOutcome(step)) parts.push(stageOutcome(step).words);
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
 * id → problems), `selected` (a vertex id), `onSelect(vertexId)`, `room` (the CSS pixels the
 * drawing has: nodes are drawn wider where they need and it allows).
 */
export function drawGraph(view, { steps = new Map(), running = new Map(), problems = new Map(), selected = null, onSelect = null, room = 0 } = {}) {
  const id = `g${++graphs}`;
  family = getComputedStyle(document.body).fontFamily || family;
  const drawn = widened(view, steps, problems, room);
  const w = drawn.w;
  const at = (node) => ({ ...node, x: drawn.x.get(node.id) });
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
    viewBox: `0 0 ${drawn.width} ${height}`,
    role: "group",
    "aria-label": `Graph of ${view.name}: ${view.nodes.length} vertices`,
  });
  svg.style.maxWidth = `${Math.round(drawn.width * SCALE)}px`; // a little larger than laid out
  svg.append(
    s(
      "defs",
      {},
      ["arrow", "arrow-cycle"].map((name) =>
        s(
          "marker",
          { id: `${id}-${name}`, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
          s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: name === "arrow" ? "arrow" : "arrow cycle" }),
        ),
      ),
    ),
  );
  const byId = new Map(view.nodes.map((n) => [n.id, at(n)]));
  const cycles = cycleMembers(view);
  for (const edge of view.edges) {
    const a = byId.get(edge.source);
    const b = byId.get(edge.target);
    if (!a || !b) continue;
    const d = a.y === b.y ? sideways(a, b, top, hgt + extra(a), w) : downwards(a, b, top(a) + hgt + extra(a), top(b));
    const looped = (cycles.get(edge.source) || []).includes(edge.target);
    svg.append(
      s("path", {
        d,
        class: ["edge", looped && "cycle"],
        "data-edge": `${edge.source}→${edge.target}`,
        "marker-end": `url(#${id}-${looped ? "arrow-cycle" : "arrow"})`,
      }),
    );
  }
  for (const node of view.nodes.map(at)) {
    const step = steps.get(node.id);
    const found = problems.get(node.id) || [];
    const status = step ? shownStatus(step).toLowerCase() : "none";
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
    group.append(fitted({ x: x + PAD, y: y + 20, class: "node-id" }, node.id, room, FONT.id));
    let secondRoom = room;
    const mark = problemMark(found);
    if (mark) {
      secondRoom -= textWidth(mark, FONT.strong) + GAP;
      group.append(s("text", { x: x + w - PAD, y: y + 20 + LINE, class: "node-problem", "text-anchor": "end" }, mark));
    }
    group.append(fitted({ x: x + PAD, y: y + 20 + LINE, class: "node-type" }, typeLine(node), secondRoom, FONT.small));
    if (step) {
      group.append(fitted({ x: x + PAD, y: y + 20 + 2 * LINE, class: "node-status" }, statusLine(step), room, FONT.status));
    }
    if (step && step.children) {
      const c = step.children;
      const below = y + hgt + STATUS_EXTRA; // the fan-out's bar and counts, under the status
      // What did not succeed, beside the count: failed children first, else cancelled ones
      // (a cancelled fan-out's bar is mostly green, and "400/400" alone reads as done).
      const [done, note, kind] = fanoutTexts(c);
      group.append(fanoutBar(x + PAD, below - 6, room, c, running.get(node.id) || 0));
      group.append(s("text", { x: x + PAD, y: below + 14, class: "node-fanout" }, done));
      if (note) {
        const noteRoom = room - textWidth(done, FONT.small) - GAP;
        group.append(fitted({ x: x + w - PAD, y: below + 14, class: `node-fanout-${kind}`, "text-anchor": "end" }, note, noteRoom, FONT.strong));
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

/** The legend of a fan-out bar's colours (each also named in words); `groups` (the API's
 * `fanout.waiting`, when they are this spawner's) say how many of the running children wait
 * inside their call, so that "waiting 0" never reads against a banner of children waiting for
 * an admission slot, and `dead` (its `fanout.presumedDead`) how many a dead worker holds. */
export function fanoutLegend(children, running = 0, groups = [], dead = []) {
  return h(
    "ul",
    { class: "legend" },
    fanoutSegments(children, running).map(([name, n]) => {
      const note = name === "running" && n ? heldNote(groups, dead) : "";
      return h("li", {}, h("span", { class: `swatch seg-${name}`, "aria-hidden": "true" }), `${name} ${count(n)}`, note ? ` (${note})` : null);
    }),
  );
}
