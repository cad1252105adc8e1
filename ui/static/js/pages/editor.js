// The workflow editor: paste or upload a document (or a list: a parent and its child
// workflows), see every problem located by line and JSON pointer, on the text and on the
// graph, before publishing it. A publish says of each version whether it serves new runs and,
// when it does not, how to make it serve (the API's hint). Publishing is an admin's: a tenant
// key checks documents here, and Publish says, disabled, that it needs an admin key.

import { api, failedAction, KEY_CHANGED } from "../api.js";
import { demoDownstream } from "../demo.js";
import { confirmAction, otherKeyButton } from "../dialog.js";
import { announce, fill, h } from "../dom.js";
import { pointerText } from "../format.js";
import { cycleMembers, drawGraph } from "../graph.js";
import { DuplicateKeyError, JsonSyntaxError, locate, parseWithPositions } from "../jsontext.js";
import { warningsBox, withWarnings } from "../warnings.js";
import { opensAdminPages, whoIsIt } from "../who.js";

const CHECK_AFTER_MS = 500;
/** Where a new document's call goes when the server has no demo downstream: a placeholder
 * that passes validation (a public host name) and says it is to be replaced. */
export const PLACEHOLDER_URL = "https://api.example.com/replace-me";

/** A new document: one GET, to the demo downstream under `serve --demo` (its URL from
 * /ui/config; it answers `/items` with a list), else to `PLACEHOLDER_URL`. */
export function starter(demoDownstream) {
  const url = demoDownstream ? `${demoDownstream}/items?count=3` : PLACEHOLDER_URL;
  return { name: "my-workflow", vertices: { fetch: { type: "GATEWAY", config: { url, method: "GET" } } } };
}

/** "/0/vertices/x/config" → [0, "x"]; "/vertices/x" → [0, "x"] for a single document. */
export function vertexOf(pointer, isList) {
  const parts = pointer.split("/").slice(1).map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
  const index = isList ? Number(parts.shift()) : 0;
  if (parts[0] === "vertices" && parts.length > 1) return [index, parts[1]];
  return [index, null];
}

/** `problems` (vertex id → its problems) with a cycle's problem on every vertex of the cycle:
 * the API names the cycle at one of its vertices, but none of them can ever start. */
export function onWholeCycles(problems, cycles) {
  for (const [vertex, found] of [...problems]) {
    for (const problem of found.filter((p) => p.code === "cycle")) {
      for (const member of cycles.get(vertex) || []) {
        const theirs = problems.get(member) || [];
        if (!theirs.includes(problem)) problems.set(member, [...theirs, problem]);
      }
    }
  }
  return problems;
}

/** Whether a published version serves new runs, as the API said (`serving`; nothing from an
 * older API that does not say). */
function servingWords(result) {
  if (result.serving === true) return " — serves new runs";
  if (result.serving === false) return " — not serving yet";
  return "";
}

/** What to do to make a published version that does not serve serve: the API's `hint` (a
 * deployment, or an admin's switch; its commands as code) as a warning, and a link to the
 * version's page, where its Deploy button is. */
function servingHint(result) {
  if (result.serving !== false) return null;
  const box = warningsBox([result.hint], { className: "serving-hint" });
  if (!box) return null;
  box.dataset.workflow = result.name;
  const page = `#/workflows/${encodeURIComponent(result.name)}?v=${result.version}`;
  box.append(". ", h("a", { href: page }, `Open ${result.name} v${result.version}`));
  return box;
}

/** `problems` each with where its pointer is in the text (`locate`: its line and offset, or its
 * closest written ancestor's), in the order they are written: by line, then column (the API
 * sorts them by pointer, and "/vertices/b" may be written after "/vertices/c"). One found
 * nowhere in the text (a parse mid-edit) goes last; ties keep the API's order. */
function inTextOrder(problems, positions) {
  const located = problems.map((problem) => ({ problem, where: positions ? locate(positions, problem.pointer) : null }));
  const at = ({ where }) => (where ? [where.line, where.start] : [Number.MAX_SAFE_INTEGER, 0]);
  return located.sort((a, b) => at(a)[0] - at(b)[0] || at(a)[1] - at(b)[1]);
}

export async function editorPage(main, params) {
  const area = h("textarea", { id: "document", class: "code editor-text", spellcheck: "false", wrap: "off", "aria-describedby": "editor-state" });
  const gutter = h("pre", { class: "gutter", "aria-hidden": "true" });
  const state = h("p", { id: "editor-state", class: "editor-state", role: "status" });
  const problemsBox = h("ol", { class: "problems", "aria-label": "Problems" });
  const graphs = h("div", { class: "editor-graphs" });
  const published = h("div");
  const upload = h("input", { type: "file", id: "upload", accept: ".json,application/json" });
  const publish = h("button", { type: "button", class: "primary", disabled: true, onclick: doPublish }, "Publish");
  // Shown disabled with its reason rather than hidden: the editor's end is a publish, and a
  // page without the button would leave a tenant key looking for it.
  const needsAdmin = h("p", { id: "publish-needs-admin", class: "publish-needs-admin small", hidden: true });
  let valid = false; // the last text checked is valid
  let publishes = opensAdminPages(await whoIsIt()); // read once per key: the header has asked already
  let timer = null;
  let current = null; // {value, positions} of the last text that parsed
  let checkedText = null; // the text the last check read
  let problemLines = new Map();
  // The graph of the last text that was checked stays while the text is not (yet) checked:
  // it keeps the author's bearings mid-edit, but it is dimmed and said to be old, in words.
  const staleNote = h("p", { id: "graph-stale", class: "graph-stale" });

  /** Publish enabled for a valid text and a key that may publish, else disabled, and for a key
   * that may not, why (another key is a click away). */
  function drawPublish() {
    publish.disabled = !valid || !publishes;
    needsAdmin.hidden = publishes;
    if (publishes) publish.removeAttribute("aria-describedby");
    else publish.setAttribute("aria-describedby", needsAdmin.id);
    if (!publishes && !needsAdmin.firstChild) {
      fill(needsAdmin, "Publishing needs an admin key: this key may check a document, not publish it. ", otherKeyButton(() => {}));
    }
    if (valid) state.textContent = publishes ? "✓ Valid: ready to publish." : "✓ Valid.";
  }

  /** Another key (the prompt, "Use another key…"): whether it may publish. */
  async function keyChanged() {
    publishes = opensAdminPages(await whoIsIt());
    drawPublish();
  }

  function markStale(words) {
    if (!graphs.firstChild) return; // nothing drawn yet: nothing to mislead
    staleNote.textContent = `⚠ ${words}`;
    if (!staleNote.isConnected) graphs.before(staleNote);
    graphs.classList.add("stale");
    graphs.setAttribute("aria-describedby", staleNote.id);
  }

  function markFresh() {
    staleNote.remove();
    graphs.classList.remove("stale");
    graphs.removeAttribute("aria-describedby");
  }

  function drawGutter() {
    const lines = area.value.split("\n").length;
    const text = [];
    for (let n = 1; n <= lines; n++) text.push(`${problemLines.has(n) ? "⚠" : " "}${String(n).padStart(4)}`);
    gutter.textContent = text.join("\n");
    gutter.scrollTop = area.scrollTop;
  }

  function selectLine(line) {
    const starts = [0];
    for (let i = 0; i < area.value.length; i++) if (area.value[i] === "\n") starts.push(i + 1);
    const start = starts[line - 1] ?? 0;
    const end = (starts[line] ?? area.value.length + 1) - 1;
    area.focus();
    area.setSelectionRange(start, end);
    const lineHeight = area.scrollHeight / starts.length;
    area.scrollTop = Math.max(0, (line - 3) * lineHeight);
  }

  function showProblems(problems, isList) {
    problemLines = new Map();
    const byVertex = new Map();
    const items = inTextOrder(problems, current && current.positions).map(({ problem, where }) => {
      const line = where ? where.line : 1;
      problemLines.set(line, true);
      const [index, vertex] = vertexOf(problem.pointer, isList);
      if (vertex) {
        const key = `${index}:${vertex}`;
        byVertex.set(key, [...(byVertex.get(key) || []), problem]);
      }
      return h(
        "li",
        { class: "problem", "data-pointer": problem.pointer, "data-line": String(line) },
        h(
          "button",
          { type: "button", class: "link", onclick: () => selectLine(line) },
          h("span", { class: "problem-line" }, `line ${line}`),
          " · ",
          h("code", {}, pointerText(problem.pointer)),
        ),
        ` — ${problem.message} `,
        h("span", { class: "muted" }, `(${problem.code})`),
      );
    });
    fill(problemsBox, items);
    drawGutter();
    return byVertex;
  }

  async function check() {
    fill(published);
    checkedText = area.value;
    try {
      current = parseWithPositions(area.value);
    } catch (error) {
      current = null;
      const located = error instanceof JsonSyntaxError;
      const line = located ? error.line : 1;
      const twice = error instanceof DuplicateKeyError;
      problemLines = new Map([[line, true]]);
      drawGutter();
      // The button says where (line and column), the text what: the error's message repeats
      // the place, so its reason alone follows the button.
      const where = located ? `line ${line}, column ${error.column}` : `line ${line}`;
      const what = located ? error.reason : String(error.message || error);
      fill(problemsBox, h("li", { class: "problem", "data-line": String(line) }, h("button", { type: "button", class: "link", onclick: () => selectLine(line) }, h("span", { class: "problem-line" }, where)), twice ? ` — ${what} ` : ` — not JSON: ${what}`, twice ? h("span", { class: "muted" }, "(duplicate_key)") : null));
      state.textContent = twice ? `✕ The key ${JSON.stringify(error.key)} is written twice.` : "✕ The text is not JSON yet.";
      state.className = "editor-state bad";
      valid = false;
      drawPublish();
      markStale(`Showing the last text that was ${twice ? "checked" : "JSON"}; fix line ${line} to update.`);
      return;
    }
    let report;
    try {
      report = await api("/workflows/preview", { method: "POST", body: current.value });
    } catch (error) {
      state.textContent = `✕ ${error.message}`;
      state.className = "editor-state bad";
      valid = false;
      drawPublish();
      markStale("Showing the last text that was checked; this one could not be.");
      return;
    }
    const isList = Array.isArray(current.value);
    const byVertex = showProblems(report.problems, isList);
    markFresh();
    fill(
      graphs,
      report.graphs.map((graph, index) => {
        const problems = new Map();
        for (const [key, found] of byVertex) {
          const [i, vertex] = key.split(/:(.*)/s);
          if (Number(i) === index) problems.set(vertex, found);
        }
        onWholeCycles(problems, cycleMembers(graph));
        return h("figure", {}, h("figcaption", {}, graph.name || `document ${index}`), graph.nodes.length ? drawGraph(graph, { problems }) : h("p", { class: "muted" }, "No vertices to draw."));
      }),
    );
    valid = report.valid;
    if (!valid) state.textContent = `✕ ${report.problems.length} problem${report.problems.length === 1 ? "" : "s"}.`;
    state.className = `editor-state ${valid ? "ok" : "bad"}`;
    drawPublish(); // and a valid text's words, which say whether the key may publish it
  }

  function changed() {
    drawGutter();
    clearTimeout(timer);
    timer = setTimeout(check, CHECK_AFTER_MS);
  }

  async function doPublish() {
    // Text typed or pasted since the last check (its pause not yet over) is checked first:
    // publishing `current` then sent the text before it, another workflow than the one shown.
    if (area.value !== checkedText) {
      clearTimeout(timer);
      await check();
      if (publish.disabled) return;
    }
    if (!current) return;
    const ok = await confirmAction({
      title: "Publish?",
      text: "Each workflow becomes a new immutable version (unchanged ones keep their latest version).",
      confirm: "Publish",
    });
    if (!ok) return;
    try {
      const answer = await api("/workflows", { method: "POST", body: current.value });
      const results = Array.isArray(answer) ? answer : [answer];
      const notServing = results.filter((r) => r.serving === false);
      fill(
        published,
        h(
          "div",
          { class: "ok-box", role: "status" },
          "✓ Published: ",
          results.map((r, i) => [i ? ", " : "", h("a", { href: `#/workflows/${encodeURIComponent(r.name)}?v=${r.version}` }, `${r.name} v${r.version}`), r.created ? "" : " (unchanged)", servingWords(r)]),
        ),
        notServing.map(servingHint),
      );
      announce(withWarnings("Published.", notServing.map((r) => r.hint)), notServing.length ? "warning" : "ok");
    } catch (error) {
      // A tenant key may validate but not publish (403). Another key is taken here without
      // drawing the page again, which would lose the document being edited.
      fill(published, h("p", { class: "error-box", role: "alert" }, `✕ ${failedAction("Publish", error)}`, error.status === 403 ? [" ", otherKeyButton(() => fill(published, h("p", { class: "ok-box", role: "status" }, "Key changed: publish again.")))] : null));
    }
  }

  upload.addEventListener("change", async () => {
    const file = upload.files[0];
    if (!file) return;
    area.value = await file.text();
    changed();
  });
  area.addEventListener("input", changed);
  area.addEventListener("scroll", () => {
    gutter.scrollTop = area.scrollTop;
  });

  const from = params.get("from");
  if (from) {
    const version = params.get("v");
    const detail = await api(`/workflows/${encodeURIComponent(from)}${version ? `/versions/${Number(version)}` : ""}`);
    area.value = JSON.stringify(detail.document, null, 2);
  } else {
    area.value = JSON.stringify(starter(await demoDownstream()), null, 2);
  }

  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Workflow editor"), h("div", { class: "toolbar" }, h("label", { for: "upload" }, "Upload a file "), upload, publish)),
    needsAdmin,
    // The text area's label: what a screen reader names it by, and what it is for.
    h("label", { for: "document", class: "muted editor-label" }, "Paste a workflow document (or a list: a parent and its child workflows). It is checked as you type; nothing is stored until you publish."),
    h("div", { class: "editor-grid" }, h("div", { class: "editor" }, gutter, area), h("div", {}, state, problemsBox, published)),
    h("section", { "aria-label": "Graph preview" }, h("h2", {}, "Graph"), graphs),
  );
  drawGutter();
  await check();
  window.addEventListener(KEY_CHANGED, keyChanged);
  return () => {
    clearTimeout(timer);
    window.removeEventListener(KEY_CHANGED, keyChanged);
  };
}

