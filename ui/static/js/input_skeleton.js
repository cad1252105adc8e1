// The Start-a-run form's first input: the workflow's required fields with a blank value of
// their type, so that an operator sees what the input needs instead of `{}` and a refusal.

const BLANK = { string: "", number: 0, integer: 0, boolean: false, array: [], null: null };

/** The first JSON type a schema allows (its `type`, or the first of a list). */
function typeOf(schema) {
  const type = schema && schema.type;
  return Array.isArray(type) ? type[0] : type;
}

/** A blank value for `schema`: its `default`, an object of its own required fields, or the
 * blank of its type; `depth` bounds a schema that nests objects deeply. */
function blank(schema, depth) {
  if (!schema || typeof schema !== "object") return "";
  if ("default" in schema) return schema.default;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
  const type = typeOf(schema);
  if (type === "object" || (!type && schema.properties)) return depth > 0 ? skeleton(schema, depth - 1) : {};
  return type in BLANK ? structuredClone(BLANK[type]) : "";
}

/** `schema`'s required properties, each with a blank value (an empty object when it requires
 * none, or is not an object schema). */
export function skeleton(schema, depth = 3) {
  const out = {};
  if (!schema || typeof schema !== "object") return out;
  const properties = schema.properties || {};
  for (const name of Array.isArray(schema.required) ? schema.required : []) out[name] = blank(properties[name], depth);
  return out;
}

/** "customerId (string), subject (string)": the required fields and their types, for the
 * form's line; empty when there are none. */
export function requiredFields(schema) {
  if (!schema || !Array.isArray(schema.required)) return "";
  const properties = schema.properties || {};
  return schema.required.map((name) => (typeOf(properties[name]) ? `${name} (${typeOf(properties[name])})` : name)).join(", ");
}
