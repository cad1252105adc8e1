// The form that starts a deployment of a workflow version (a modal <dialog>: focus stays
// inside, Escape cancels): the stages' weights, how long each holds, and when the candidate
// rolls back. Fields left as they are send the API's defaults; a refusal is shown in the
// dialog, which stays open so the operator can fix the value.

import { api } from "./api.js";
import { FIELDS, inFormWords, labelOf, outside, publishedLimits } from "./deploy_limits.js";
import { h } from "./dom.js";
import { parseSpan } from "./format.js";
import { withCode } from "./warnings.js";

const DEFAULTS = { stages: "10, 25, 50, 100", minRuns: "20", minDuration: "60s", maxFailureRatio: "0.05", margin: "", minFinished: "20" };

function field(id, label, value, help, attrs = {}) {
  const input = h("input", { id, name: id, value, inputmode: "decimal", autocomplete: "off", "aria-describedby": `${id}-help`, ...attrs });
  return h("div", { class: "field" }, h("label", { for: id }, label, input), h("span", { id: `${id}-help`, class: "small muted field-help" }, help));
}

/** What the form's text says, as the API's body; throws an Error naming the field. `limits`
 * (`publishedLimits()`), when known, are checked too. */
export function deploymentBody(version, values, limits = null) {
  const number = (text, key) => {
    const { label } = FIELDS[key];
    const shown = String(text).trim();
    const value = Number(shown);
    if (shown === "" || !Number.isFinite(value)) throw new Error(`${label}: "${text}" is not a number`);
    const why = outside(value, limits && limits[key]);
    if (why) throw new Error(`${label}: ${shown} ${why}`);
    return value;
  };
  // A span as the CLI's --min-duration takes it (60s, 5m, 1h; a bare number is seconds).
  const span = (text, key) => {
    const { label } = FIELDS[key];
    const shown = String(text).trim();
    let seconds;
    try {
      seconds = parseSpan(shown);
    } catch (error) {
      throw new Error(`${label}: ${error.message}`);
    }
    const why = outside(seconds, limits && limits[key]);
    const inSeconds = shown === String(seconds) ? "" : ` (${seconds.toLocaleString("en")} s)`;
    if (why) throw new Error(`${label}: ${shown}${inSeconds} ${why} seconds`);
    return seconds;
  };
  const weights = String(values.stages)
    .split(",")
    .map((part) => part.trim().replace(/%$/, ""))
    .filter((part) => part !== "")
    .map((part) => number(part, "stages"));
  if (!weights.length) throw new Error("Stages: give at least one weight, e.g. 10, 50, 100");
  if (limits && limits.stageCount !== undefined && weights.length > limits.stageCount) throw new Error(`Stages: ${weights.length} weights, at most ${limits.stageCount}`);
  const minRuns = number(values.minRuns, "minRuns");
  const minDurationSeconds = span(values.minDuration, "minDuration");
  const rollback = {
    maxFailureRatio: number(values.maxFailureRatio, "maxFailureRatio"),
    minFinishedRuns: number(values.minFinished, "minFinished"),
  };
  if (String(values.margin).trim() !== "") rollback.marginOverServing = number(values.margin, "margin");
  return { version, stages: weights.map((weight) => ({ weight, minRuns, minDurationSeconds })), rollback };
}

/** The API's refusal in the form's words, once: for a body that did not fit (its message is
 * the first problem again, with a pointer), each distinct problem by its field's label;
 * otherwise the API's own sentence. */
export function refusalText(error) {
  const problems = (error.details && error.details.problems) || [];
  let said = error.message;
  if (error.code === "invalid_request" && problems.length) said = [...new Set(problems.map((p) => `${labelOf(p.pointer)}: ${p.message}`))].join("; ");
  return `✕ ${said}${error.code ? ` (${error.code})` : ""}`;
}

/** Open the form for `name` v`version` (serving: the version new runs get now). Resolves the
 * deployment the API started, or null when cancelled. What the start would warn about is said
 * first (its preview), and a second press starts it; a warning only the start answers keeps
 * the dialog open until it is closed. */
export function deployForm(name, version, serving) {
  publishedLimits(); // asked now, so Deploy does not wait for it
  return new Promise((resolve) => {
    const inputs = {
      stages: field("deploy-stages", "Stages (weights in %, rising to 100)", DEFAULTS.stages, "The share of new runs the candidate gets at each stage."),
      minRuns: field("deploy-min-runs", "Runs per stage", DEFAULTS.minRuns, "A stage ends only after the candidate received this many runs…", { inputmode: "numeric" }),
      minDuration: field("deploy-min-duration", "Time per stage", DEFAULTS.minDuration, "…and after this long: 60s, 5m, 1h (a bare number is seconds).", { inputmode: "text" }),
      maxFailureRatio: field("deploy-max-failure-ratio", "Maximum failure ratio", DEFAULTS.maxFailureRatio, "Over this share of FAILED runs the candidate rolls back by itself (0 to 1)."),
      margin: field("deploy-margin", "Margin over serving (optional)", DEFAULTS.margin, `Or over v${serving}'s own failure ratio plus this, if higher.`),
      minFinished: field("deploy-min-finished", "Finished runs before judging", DEFAULTS.minFinished, "The candidate is judged once this many of its runs have finished; no stage passes before.", { inputmode: "numeric" }),
    };
    const state = h("p", { class: "deploy-state", role: "alert" });
    const submit = h("button", { type: "submit", class: "primary" }, `Deploy v${version}`);
    const cancel = h("button", { type: "button", class: "secondary", onclick: () => dialog.close("cancel") }, "Cancel");
    let started = null;
    // The body the operator was warned about (and the warnings): pressing Deploy again with it
    // unchanged starts the deployment; changing a field asks again.
    let warnedFor = null;
    let warned = [];
    // A refusal is said under the fields: on a short screen the dialog scrolls, and someone
    // who pressed Enter in the first field would not see it (role=alert reads it out anyway).
    const refuse = (text) => {
      state.textContent = text;
      state.className = "deploy-state error-box";
      state.scrollIntoView({ block: "nearest" });
    };
    // Each warning a sentence of its own (the API's have no full stop: joined, two ran
    // together), its options named by the form's labels, its `quotes` as code.
    const sentence = (warning) => withCode(inFormWords(warning).replace(/([^.!?])$/, "$1."));
    const said = (warnings) => (warnings.length === 1 ? sentence(warnings[0]) : [h("ul", {}, warnings.map((warning) => h("li", {}, sentence(warning))))]);
    function warnBefore(warnings) {
      state.className = "deploy-state deploy-warning";
      state.replaceChildren(h("strong", {}, "⚠ Before you deploy: "), ...said(warnings));
      submit.textContent = `Deploy v${version} anyway`;
      submit.disabled = false;
      state.scrollIntoView({ block: "nearest" });
    }
    // Started, but it may not progress (e.g. parents pin the workflow's version): the dialog
    // stays open with the API's warning until the operator has read it and follows it.
    function showWarnings(warnings) {
      state.className = "deploy-state deploy-warning";
      state.replaceChildren(h("strong", {}, "Deployment started. "), ...said(warnings));
      const follow = h("button", { type: "button", class: "primary", onclick: () => dialog.close("ok") }, "Follow the deployment");
      for (const box of Object.values(inputs)) box.querySelector("input").disabled = true;
      form.querySelector(".modal-buttons").replaceChildren(follow);
      follow.focus();
    }
    const form = h(
      "form",
      {
        class: "deploy-form",
        onsubmit: async (event) => {
          event.preventDefault();
          const values = Object.fromEntries(Object.entries(inputs).map(([key, box]) => [key, box.querySelector("input").value]));
          let body;
          try {
            body = deploymentBody(version, values, await publishedLimits());
          } catch (error) {
            refuse(`✕ ${error.message}`);
            return;
          }
          submit.disabled = true;
          const path = `/workflows/${encodeURIComponent(name)}/deployments`;
          try {
            // What the start would warn about is said before it starts (a version rolled back
            // before, an inputSchema that refuses recent inputs): the second press starts it.
            const asked = JSON.stringify(body);
            if (warnedFor !== asked) {
              const preview = await api(`${path}/preview`, { method: "POST", body });
              if (preview.warnings && preview.warnings.length) {
                warnBefore(preview.warnings);
                warned = preview.warnings;
                warnedFor = asked;
                return;
              }
            }
            started = await api(path, { method: "POST", body });
            const fresh = (started.warnings || []).filter((warning) => !warned.includes(warning));
            if (fresh.length) {
              showWarnings(fresh);
              return;
            }
            dialog.close("ok");
          } catch (error) {
            refuse(refusalText(error));
            submit.disabled = false;
          }
        },
      },
      h("h2", { id: "modal-title" }, `Deploy ${name} v${version}`),
      h("p", {}, `New runs move from v${serving} to v${version} stage by stage; after the last stage v${version} serves. If it fails more than allowed it is rolled back by itself and v${serving} takes every run again.`),
      h(
        "div",
        {
          class: "deploy-fields",
          oninput: () => {
            state.textContent = "";
            state.className = "deploy-state";
            submit.textContent = `Deploy v${version}`;
            warnedFor = null;
          },
        },
        Object.values(inputs),
      ),
      state,
      h("div", { class: "modal-buttons" }, cancel, submit),
    );
    const dialog = h("dialog", { class: "modal deploy-dialog", "aria-labelledby": "modal-title" }, form);
    document.body.append(dialog);
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(started); // null unless the API started it (closed by Escape after a warning too)
    });
    dialog.showModal();
    inputs.stages.querySelector("input").focus();
  });
}
