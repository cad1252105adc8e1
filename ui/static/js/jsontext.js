// Where things are in a JSON text: a small parser that records the line and column of every
// value by its JSON pointer (RFC 6901), so a problem the API reports at a pointer can be shown
// at its line, and a syntax error is reported at its line and column.

export class JsonSyntaxError extends Error {
  constructor(message, offset, text) {
    const { line, column } = lineColumn(text, offset);
    super(`line ${line}, column ${column}: ${message}`);
    // What is wrong without where: a view that shows the place on its own (the editor's
    // problem list) says it once.
    this.reason = message;
    this.offset = offset;
    this.line = line;
    this.column = column;
  }
}

export function lineColumn(text, offset) {
  let line = 1;
  let start = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text[i] === "\n") {
      line++;
      start = i + 1;
    }
  }
  return { line, column: offset - start + 1 };
}

/** A key written twice in one object: JSON.parse (and the server's parser) would keep the
 * last value without a word, so the text is refused where the second one is written. */
export class DuplicateKeyError extends JsonSyntaxError {
  constructor(key, offset, text) {
    super(`the key ${JSON.stringify(key)} appears more than once in this object; keep only one`, offset, text);
    this.key = key;
  }
}

/** A string or key holding an unpaired UTF-16 surrogate (`"\\ud800"`): JSON's escapes allow
 * it, but it is no Unicode text, and the API refuses it (422 `not_utf8`). Said here, where it
 * is written: a Resolve dialog showed "✓ valid JSON", then closed on the API's refusal, the
 * text typed lost. */
export class UnpairedSurrogateError extends JsonSyntaxError {
  constructor(offset, text) {
    super("this string holds an unpaired UTF-16 surrogate (such as \\ud800), which is not valid Unicode; remove it or write the whole character", offset, text);
  }
}

const UNPAIRED = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function escapePointer(token) {
  return String(token).replaceAll("~", "~0").replaceAll("/", "~1");
}

/** Parse `text`: {value, positions} where positions maps each pointer to {start, end, line}
 * (the value's span; for a member, from its key). Throws JsonSyntaxError (DuplicateKeyError
 * for a key written twice in one object). */
export function parseWithPositions(text) {
  let i = 0;
  const positions = new Map();
  const fail = (message) => {
    throw new JsonSyntaxError(message, i, text);
  };
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const literal = (word, value) => {
    if (text.startsWith(word, i)) {
      i += word.length;
      return value;
    }
    return fail(`unexpected ${JSON.stringify(text[i] ?? "end of text")}`);
  };
  const string = () => {
    const start = i;
    i++; // opening quote
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\") i++;
      else if (text[i] === "\n") fail("a string cannot span lines");
      i++;
    }
    if (i >= text.length) fail("a string is not closed");
    i++;
    let parsed;
    try {
      parsed = JSON.parse(text.slice(start, i));
    } catch {
      i = start;
      return fail("invalid escape in a string");
    }
    if (UNPAIRED.test(parsed)) throw new UnpairedSurrogateError(start, text);
    return parsed;
  };
  const number = () => {
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!match) fail(`unexpected ${JSON.stringify(text[i])}`);
    i += match[0].length;
    return Number(match[0]);
  };
  const value = (pointer, memberStart) => {
    space();
    const start = memberStart ?? i;
    let found;
    const c = text[i];
    if (c === "{") found = object(pointer);
    else if (c === "[") found = array(pointer);
    else if (c === '"') found = string();
    else if (c === "t") found = literal("true", true);
    else if (c === "f") found = literal("false", false);
    else if (c === "n") found = literal("null", null);
    else if (c === "-" || (c >= "0" && c <= "9")) found = number();
    else fail(c === undefined ? "the text ends where a value should be" : `unexpected ${JSON.stringify(c)}`);
    positions.set(pointer, { start, end: i, line: lineColumn(text, start).line });
    return found;
  };
  const object = (pointer) => {
    i++;
    const result = {};
    const keys = new Set();
    space();
    if (text[i] === "}") {
      i++;
      return result;
    }
    for (;;) {
      space();
      if (text[i] !== '"') fail("expected a member name in double quotes");
      const keyStart = i;
      const key = string();
      if (keys.has(key)) throw new DuplicateKeyError(key, keyStart, text);
      keys.add(key);
      space();
      if (text[i] !== ":") fail("expected ':' after a member name");
      i++;
      result[key] = value(`${pointer}/${escapePointer(key)}`, keyStart);
      space();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "}") {
        i++;
        return result;
      }
      fail("expected ',' or '}' after a member");
    }
  };
  const array = (pointer) => {
    i++;
    const result = [];
    space();
    if (text[i] === "]") {
      i++;
      return result;
    }
    for (;;) {
      result.push(value(`${pointer}/${result.length}`));
      space();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "]") {
        i++;
        return result;
      }
      fail("expected ',' or ']' after an element");
    }
  };
  const parsed = value("");
  space();
  if (i < text.length) fail("unexpected text after the document");
  return { value: parsed, positions };
}

/** The position of `pointer`, or of its closest ancestor that exists in the text. */
export function locate(positions, pointer) {
  let current = pointer;
  for (;;) {
    if (positions.has(current)) return { pointer: current, ...positions.get(current) };
    if (!current) return null;
    current = current.slice(0, current.lastIndexOf("/"));
  }
}
