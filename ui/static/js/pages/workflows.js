// Workflows: the published ones, each one's versions (the serving one marked), a version's
// graph and document, a form to start a run of it, and a Deploy button that starts a gradual
// deployment of a version that does not serve yet.

import { api } from "../api.js";
import { setParams } from "../app.js";
import { deployForm } from "../deploy_form.js";
import { fill, h } from "../dom.js";
import { breakable, pointerText, time } from "../format.js";
import { requiredFields, skeleton } from "../input_skeleton.js";
import { drawGraph } from "../graph.js";
import { DuplicateKeyError, JsonSyntaxError, parseWithPositions } from "../jsontext.js";

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
  const tenant = h("input", { id: "run-tenant", name: "tenant", value: "default" });
  const state = h("p", { role: "status" });
  const needs = requiredFields(document.inputSchema);
  const example = !document.inputSchema
    ? ""
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
          state.textContent = error instanceof DuplicateKeyError ? `✕ the input: ${error.message}` : `✕ the input is not JSON: ${error instanceof JsonSyntaxError ? error.message : error}`;
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

export async function workflowPage(main, params, name) {
  const versions = await api(`/workflows/${encodeURIComponent(name)}/versions`);
  const chosen = Number(params.get("v")) || versions.items[0].version;
  const [graph, detail, serving] = await Promise.all([
    api(`/workflows/${encodeURIComponent(name)}/versions/${chosen}/graph`),
    api(`/workflows/${encodeURIComponent(name)}/versions/${chosen}`),
    api(`/workflows/${encodeURIComponent(name)}/serving`),
  ]);
  const servingBadge = (version) => (version === serving.servingVersion ? h("span", { class: "serving-badge", title: "New runs get this version" }, "serving") : null);
  const picker = h(
    "label",
    {},
    "Version ",
    h(
      "select",
      { onchange: (event) => setParams({ v: event.target.value }) },
      versions.items.map((v) => h("option", { value: String(v.version), selected: v.version === chosen }, `v${v.version}${v.version === serving.servingVersion ? " (serving)" : ""}`)),
    ),
  );
  fill(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"), " / ", name),
    h("div", { class: "page-head" }, h("h1", {}, name, h("span", { class: "muted" }, ` v${chosen}`), servingBadge(chosen)), picker),
    deploySection(name, chosen, serving),
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
          versions.items.map((v) => h("li", {}, h("a", { href: `#/workflows/${encodeURIComponent(name)}?v=${v.version}` }, `v${v.version}`), " ", servingBadge(v.version), " · ", time(v.createdAt), ` · ${v.definitionHash.slice(0, 12)}`)),
        ),
        h("p", {}, h("a", { href: `#/runs?workflow=${encodeURIComponent(name)}` }, "Runs of this workflow"), " · ", h("a", { href: `#/runs?workflow=${encodeURIComponent(name)}&version=${chosen}` }, `runs of v${chosen}`)),
        h("p", {}, h("a", { href: `#/editor?from=${encodeURIComponent(name)}&v=${chosen}` }, "Edit a copy in the editor")),
      ),
    ),
    h("details", {}, h("summary", {}, "Document"), h("pre", { class: "json" }, JSON.stringify(detail.document, null, 2))),
  );
}

/** Where the version stands for traffic, and the Deploy button when it can be deployed. */
function deploySection(name, version, serving) {
  const running = serving.deploymentId;
  let text;
  if (running && serving.candidateVersion === version) {
    text = [`v${version} is being deployed: it gets ${serving.candidateWeight} % of new runs. `, h("a", { href: `#/deployments/${encodeURIComponent(running)}` }, "Follow the deployment")];
  } else if (version === serving.servingVersion) {
    text = `v${version} serves: new runs that name no version get it.`;
  } else if (running) {
    text = [`v${version} does not serve (v${serving.servingVersion} does). A deployment of v${serving.candidateVersion} is running; one at a time. `, h("a", { href: `#/deployments/${encodeURIComponent(running)}` }, "Open it")];
  } else {
    text = `v${version} does not serve yet: new runs get v${serving.servingVersion} until a deployment moves them.`;
  }
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
  return h("div", { class: "deploy-bar" }, h("p", { class: "deploy-state-line" }, text), button);
}
