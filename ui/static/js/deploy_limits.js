// What the API takes in the Deploy form's fields, as it publishes it (/openapi.json): the
// form checks a value in the browser and names the field as labelled, with the ranges kept in
// one place, the API's models (engine/operations/deployment_views.py).

import { api } from "./api.js";
import { pointerText } from "./format.js";

/** Each field: its label in messages, and the property of the API's body it fills (its
 * schema in /openapi.json: `StageBody` for every stage, `RollbackBody`). */
export const FIELDS = {
  stages: { label: "Stages", schema: "StageBody", property: "weight" },
  minRuns: { label: "Runs per stage", schema: "StageBody", property: "minRuns" },
  minDuration: { label: "Time per stage", schema: "StageBody", property: "minDurationSeconds" },
  maxFailureRatio: { label: "Maximum failure ratio", schema: "RollbackBody", property: "maxFailureRatio" },
  margin: { label: "Margin over serving", schema: "RollbackBody", property: "marginOverServing" },
  minFinished: { label: "Finished runs before judging", schema: "RollbackBody", property: "minFinishedRuns" },
};

let limitsAsked = null;

/** What the API takes for each field: `{key: {integer, minimum, maximum, exclusiveMinimum}}`,
 * read from the schema it publishes (/openapi.json) so the ranges live in one place, the
 * API's models; once per page. Null when it publishes none: the API's refusal then says it. */
export function publishedLimits() {
  limitsAsked ??= api("/openapi.json")
    .then((spec) => limitsFrom(spec))
    .catch(() => null);
  return limitsAsked;
}

export function limitsFrom(spec) {
  const schemas = (spec && spec.components && spec.components.schemas) || {};
  const limits = {};
  for (const [key, { schema, property }] of Object.entries(FIELDS)) {
    let found = ((schemas[schema] || {}).properties || {})[property];
    if (found && found.anyOf) found = found.anyOf.find((one) => one.type === "number" || one.type === "integer"); // optional: the number, or null
    if (found) limits[key] = { integer: found.type === "integer", minimum: found.minimum, maximum: found.maximum, exclusiveMinimum: found.exclusiveMinimum };
  }
  const stages = ((schemas.DeploymentRequest || {}).properties || {}).stages;
  const list = stages && (stages.anyOf || [stages]).find((one) => one.type === "array");
  if (list && list.maxItems !== undefined) limits.stageCount = list.maxItems;
  return limits;
}

const plain = (value) => value.toLocaleString("en");

/** Why `value` is not what `limit` allows ("is not a whole number", "is not from 0 to 1"), or "". */
export function outside(value, limit) {
  if (!limit) return "";
  if (limit.integer && !Number.isInteger(value)) return "is not a whole number";
  const { minimum, maximum, exclusiveMinimum } = limit;
  const low = exclusiveMinimum !== undefined ? value <= exclusiveMinimum : minimum !== undefined && value < minimum;
  const high = maximum !== undefined && value > maximum;
  if (!low && !high) return "";
  if (exclusiveMinimum !== undefined) return `is not over ${plain(exclusiveMinimum)}${maximum !== undefined ? ` and at most ${plain(maximum)}` : ""}`;
  if (minimum !== undefined && maximum !== undefined) return `is not from ${plain(minimum)} to ${plain(maximum)}`;
  return minimum !== undefined ? `is below ${plain(minimum)}` : `is over ${plain(maximum)}`;
}

/** "/stages/1/minRuns" → "Runs per stage" (every stage gets the same field), "/rollback/x" →
 * its field's label; any other pointer as it is. */
export function labelOf(pointer) {
  const parts = String(pointer || "").split("/");
  const property = parts[parts.length - 1];
  const schema = parts[1] === "stages" ? "StageBody" : parts[1] === "rollback" ? "RollbackBody" : null;
  const found = Object.values(FIELDS).find((f) => f.schema === schema && f.property === property);
  return found ? found.label : pointerText(pointer);
}

/** A warning of the API in the form's words: its options are named as the CLI and the API
 * spell them ("--min-finished (minFinishedRuns)", "(--min-runs, minRuns)"); the form names
 * them by their labels ("“Finished runs before judging”"). */
export function inFormWords(warning) {
  const label = (property) => {
    const found = Object.values(FIELDS).find((f) => f.property === property);
    return found ? `“${found.label}”` : null;
  };
  return String(warning)
    .replace(/--[a-z-]+ \((\w+)\)/g, (said, property) => label(property) ?? said)
    .replace(/\(--[a-z-]+, (\w+)\)/g, (said, property) => (label(property) ? `(${label(property)})` : said));
}
