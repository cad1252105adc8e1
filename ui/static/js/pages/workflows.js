// Workflows: the published ones, each one's versions (the serving one marked), a version's
// graph and document, a form to start a run of it, and a Deploy button that starts a gradual
// deployment of a version that does not serve now (for a key that may: deployments are an
// admin's, so a tenant key is offered no Deploy and no link to a deployment).

import { api } from "../api.js";
import { setParams } from "../app.js";
import { deployForm } from "../deploy_form.js";
import { fill, h, scrollable } from "../dom.js";
import { breakable, exactZoned, pointerText, time } from "../format.js";
import { requiredFields, skeleton } from "../input_skeleton.js";
import { drawGraph } from "../graph.js";
import { DuplicateKeyError, JsonSyntaxError, parseWithPositions, UnpairedSurrogateError } from "../jsontext.js";
import { opensAdminPages, whoIsIt } from "../who.js";

export async function workflowsPage(main) {
  const list = await api("/workflows");
  const rows = list.items.map((w) =>
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: `#/workflows/${encodeURIComponent(w.name)}` }, breakable(w.name))),
      h("td", {}, `v${w.latestVersion}`),
      h("td", {}, w.servingVersion ? `v${w.servingVersion}` : "—"),
      h("td", {}, String(w.versions)),
      h("td", {}, time(w.updatedAt)),
    ),
  );
  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Workflows"), h("a", { href: "#/editor", class: "button" }, "New or edit in the editor")),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "workflows" },
        h("thead", {}, h("tr", {}, ["Name", "Latest", "Serving", "Versions", "Published"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: "5", class: "empty" }, "Nothing published yet: publish one from the editor."))),
      ),
    ),
  );
}

function startForm(name, version, document) {
  const input = h("textarea", { id: "run-input", class: "code", rows: "6", spellcheck: "false" });
  const blank = skeleton(document.inputSchema);
  input.value = Object.keys(blank).length ? JSON.stringify(blank, null, 2) : "{}";
  // Empty means "the key's own": a tenant key's tenant, `default` for an admin key. A field
  // filled with `default` was refused to every tenant key (it submits for its tenant only).
  const tenant = h("input", { id: "run-tenant", name: "tenant", value: "", placeholder: "the key's tenant (default for an admin key)" });
  const state = h("p", { role: "status" });
  const needs = requiredFields(document.inputSchema);
  // Said even without a schema: an empty line left a gap under the heading, and nothing told
  // the operator that any input is taken.
  const example = !document.inputSchema
    ? "The workflow has no inputSchema: any JSON input is taken, as its steps read it."
    : needs
      ? `The input must match the workflow's inputSchema; it needs ${needs} (filled in below with blank values to replace).`
      : "The input must match the workflow's inputSchema.";
  const form = h(
    "form",
    {
      class: "start-form",
      onsubmit: async (event) => {
        event.preventDefault();
        let value;
        try {
          value = parseWithPositions(input.value).value;
        } catch (error) {
          state.textContent = error instanceof DuplicateKeyError || error instanceof UnpairedSurrogateError ? `✕ the input: ${error.message}` : `✕ the input is not JSON: ${error instanceof JsonSyntaxError ? error.message : error}`;
          state.className = "error-box";
          return;
        }
        try {
          const answer = await api(`/workflows/${encodeURIComponent(name)}/runs`, {
            method: "POST",
            body: { input: value, tenantId: tenant.value.trim() || undefined, version },
          });
          location.hash = `#/runs/${encodeURIComponent(answer.id)}`;
        } catch (error) {
          // One problem a line: joined into the message, each one's full stop ran into the next.
          const problems = (error.details.problems || []).map((p) => h("li", {}, `${pointerText(p.pointer)}: ${p.message}`));
          fill(state, h("p", {}, `✕ ${error.message}`), problems.length ? h("ul", { class: "problems" }, problems) : null);
          state.className = "error-box";
        }
      },
    },
    h("h2", {}, "Start a run"),
    h("p", { class: "muted" }, example),
    h("label", { for: "run-input" }, "Input (JSON)"),
    input,
    h("label", { for: "run-tenant" }, "Tenant"),
    tenant,
    h("button", { type: "submit", class: "primary" }, `Start a run of v${version}`),
    state,
  );
  return form;
}

/** The workflow's latest deployments, newest first (null: not readable). Deployments are an
 * admin's to read: for another key (`opens`: `opensAdminPages`) the page goes without what
 * they tell, and does not ask. */
async function deploymentsOf(name, opens) {
  if (!opens) return null;
  try {
    return (await api(`/workflows/${encodeURIComponent(name)}/deployments?limit=100`)).items;
  } catch {
    return null;
  }
}

/** The versions that ended a deployment rolled back or aborted (the newest deployment of each
 * says), unless one serves or is a candidate now. */
function stoppedVersions(items) {
  const stopped = new Map();
  for (const d of items || []) {
    if (!stopped.has(d.candidateVersion)) stopped.set(d.candidateVersion, d.status);
  }
  for (const [version, status] of stopped) if (!STOPPED_WORDS[status]) stopped.delete(version);
  return stopped;
}

/** The workflow's serving switches, newest first (`workflow.serving_set`: an admin's switch,
 * a promotion); null when the audit cannot be read (an admin's, as deployments are). */
async function servingSwitchesOf(name, opens) {
  if (!opens) return null;
  const query = new URLSearchParams({ action: "workflow.serving_set", subjectKind: "workflow", subjectId: name, limit: "100" });
  try {
    return (await api(`/audit?${query}`)).items;
  } catch {
    return null;
  }
}

/** Which versions served before, and until when: `served`, the first version (it served at
 * once), each deployment's baseline and promoted candidate, each switch's version and the one
 * it replaced; `until`, for a version whose latest known change ended its serving (a switch
 * or a promotion of another replaced it), that moment — never guessed: a version whose
 * latest known change started it, and that does not serve now, has none. Null when the
 * deployments cannot be read (nothing is known either way). */
function servingHistory(deployments, switches) {
  if (deployments === null) return null;
  const served = new Set([1]);
  const latest = new Map(); // version → [at, "start" | "end"]
  const note = (version, at, kind) => {
    served.add(version);
    const known = latest.get(version);
    if (at && (!known || at > known[0])) latest.set(version, [at, kind]);
  };
  for (const d of deployments) {
    note(d.servingVersion, d.createdAt, "start"); // it served when the deployment began
    if (d.status === "SUCCEEDED") {
      note(d.candidateVersion, d.endedAt, "start");
      note(d.servingVersion, d.endedAt, "end");
    }
  }
  for (const e of switches || []) {
    const detail = e.detail || {};
    if (typeof detail.version === "number") note(detail.version, e.at, "start");
    if (typeof detail.was === "number" && detail.was !== detail.version) note(detail.was, e.at, "end");
  }
  const until = new Map([...latest].filter(([, [, kind]]) => kind === "end").map(([v, [at]]) => [v, at]));
  return { served, until };
}

const STOPPED_WORDS = { ROLLED_BACK: "rolled back", ABORTED: "deployment aborted" };

/** Each version's role for new runs: [word, class, title], or null for a version with none. */
function roleOf(version, serving, stopped) {
  if (version === serving.servingVersion) return ["serving", "serving-badge", "New runs get this version"];
  if (serving.deploymentId && version === serving.candidateVersion) {
    return [`candidate ${serving.candidateWeight} %`, "candidate-badge", `A deployment's candidate: it gets ${serving.candidateWeight} % of new runs`];
  }
  const status = stopped.get(version);
  return status ? [STOPPED_WORDS[status], "stopped-badge", "Its deployment ended without it serving: it gets no new runs"] : null;
}

export async function workflowPage(main, params, name) {
  const opens = opensAdminPages(await whoIsIt()); // read once per key: the header has asked already
  const [versions, serving, deployments, switches] = await Promise.all([
    api(`/workflows/${encodeURIComponent(name)}/versions`),
    api(`/workflows/${encodeURIComponent(name)}/serving`),
    deploymentsOf(name, opens),
    servingSwitchesOf(name, opens),
  ]);
  const stopped = stoppedVersions(deployments);
  // The page opens on the version new runs get, not the latest: that may be a candidate
  // getting a share of them, or a version rolled back. The others are one click away.
  const chosen = Number(params.get("v")) || serving.servingVersion || versions.items[0].version;
  const [graph, detail] = await Promise.all([
    api(`/workflows/${encodeURIComponent(name)}/versions/${chosen}/graph`),
    api(`/workflows/${encodeURIComponent(name)}/versions/${chosen}`),
  ]);
  const role = (version) => roleOf(version, serving, stopped);
  const roleBadge = (version) => {
    const found = role(version);
    return found ? h("span", { class: ["role-badge", found[1]], title: found[2] }, found[0]) : null;
  };
  const picker = h(
    "label",
    {},
    "Version ",
    h(
      "select",
      { onchange: (event) => setParams({ v: event.target.value }) },
      versions.items.map((v) => h("option", { value: String(v.version), selected: v.version === chosen }, `v${v.version}${role(v.version) ? ` (${role(v.version)[0]})` : ""}`)),
    ),
  );
  fill(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"), " / ", name),
    h("div", { class: "page-head" }, h("h1", {}, name, h("span", { class: "muted" }, ` v${chosen}`), roleBadge(chosen)), picker),
    deploySection(name, chosen, serving, otherVersionsNote(name, chosen, serving, versions.items[0].version, role), servingHistory(deployments, switches), opens),
    detail.document.description ? h("p", {}, detail.document.description) : null,
    h("p", { class: "muted" }, "Published ", time(detail.createdAt), ` · hash ${detail.definitionHash.slice(0, 12)}`),
    h("section", { "aria-label": "Graph" }, drawGraph(graph)),
    h(
      "div",
      { class: "two-col" },
      startForm(name, chosen, detail.document),
      h(
        "section",
        {},
        h("h2", {}, "Versions"),
        h(
          "ul",
          { class: "versions" },
          versions.items.map((v) => h("li", { "data-version": String(v.version) }, h("a", { href: `#/workflows/${encodeURIComponent(name)}?v=${v.version}` }, `v${v.version}`), " ", roleBadge(v.version), " · ", time(v.createdAt), ` · ${v.definitionHash.slice(0, 12)}`)),
        ),
        h("p", {}, h("a", { href: `#/runs?workflow=${encodeURIComponent(name)}` }, "Runs of this workflow"), " · ", h("a", { href: `#/runs?workflow=${encodeURIComponent(name)}&version=${chosen}` }, `runs of v${chosen}`)),
        h("p", {}, h("a", { href: `#/editor?from=${encodeURIComponent(name)}&v=${chosen}` }, "Edit a copy in the editor")),
      ),
    ),
    h("details", {}, h("summary", {}, "Document"), scrollable(h("pre", { class: "json" }, JSON.stringify(detail.document, null, 2)))),
  );
}

/** On the serving version's page, the versions an operator may look for instead, each a link:
 * the candidate of a running deployment, and the latest version when it is another. */
function otherVersionsNote(name, chosen, serving, latest, role) {
  if (chosen !== serving.servingVersion) return null;
  const link = (version) => h("a", { href: `#/workflows/${encodeURIComponent(name)}?v=${version}` }, `Open v${version}`);
  const lines = [];
  if (serving.deploymentId && serving.candidateVersion !== chosen) {
    lines.push([`v${serving.candidateVersion} is a deployment's candidate: it gets ${serving.candidateWeight} % of new runs. `, link(serving.candidateVersion)]);
  }
  if (latest !== chosen && latest !== serving.candidateVersion) {
    const what = role(latest) ? ` (${role(latest)[0]})` : "";
    lines.push([`v${latest}, the latest${what}, does not serve. `, link(latest)]);
  }
  return lines.map((line) => h("p", { class: "other-version" }, line));
}

/** Why a version gets no new runs while no deployment runs: "yet" only for one that never
 * served, as far as `history` (`servingHistory`) tells; one that did is "not serving now",
 * "served until …" when a promotion of another ended it. */
function notServingText(version, serving, history) {
  const rest = `new runs get v${serving.servingVersion} until a deployment moves them.`;
  if (history === null) return `v${version} does not serve now: ${rest}`;
  if (!history.served.has(version)) return `v${version} does not serve yet: ${rest}`;
  const until = history.until.get(version);
  if (until) return [`v${version} served until `, h("time", { class: "served-until", datetime: new Date(until * 1000).toISOString() }, exactZoned(until)), `; not serving now: ${rest}`];
  return `v${version} served before; not serving now: ${rest}`;
}

/** Where the version stands for traffic (and `others`, the other versions to look at), and
 * the Deploy button when it can be deployed. `opens` (`opensAdminPages`): whether the key may
 * open a deployment and start one; a tenant key reads where the version stands, with neither
 * the running deployment's link nor the button (a disabled Deploy on every version would only
 * say, again and again, what a tenant never does). */
function deploySection(name, version, serving, others, history, opens) {
  const running = serving.deploymentId;
  const follow = (words) => (opens ? h("a", { href: `#/deployments/${encodeURIComponent(running)}` }, words) : null);
  let text;
  if (running && serving.candidateVersion === version) {
    text = [`v${version} is being deployed: it gets ${serving.candidateWeight} % of new runs. `, follow("Follow the deployment")];
  } else if (version === serving.servingVersion) {
    text = `v${version} serves: new runs that name no version get it.`;
  } else if (running) {
    text = [`v${version} does not serve (v${serving.servingVersion} does). A deployment of v${serving.candidateVersion} is running; one at a time. `, follow("Open it")];
  } else {
    text = notServingText(version, serving, history);
  }
  const line = h("div", {}, h("p", { class: "deploy-state-line" }, text), others);
  if (!opens) return h("div", { class: "deploy-bar" }, line);
  const deployable = !running && version !== serving.servingVersion;
  const button = h(
    "button",
    {
      type: "button",
      class: "primary",
      disabled: !deployable,
      title: deployable ? null : "only a version that does not serve, while no deployment of the workflow runs",
      onclick: async () => {
        const started = await deployForm(name, version, serving.servingVersion);
        if (started) location.hash = `#/deployments/${encodeURIComponent(started.id)}`;
      },
    },
    `Deploy v${version}…`,
  );
  return h("div", { class: "deploy-bar" }, line, button);
}
