// The REST API, as the monitor calls it: JSON in and out, the API key from sessionStorage,
// and a 401 answered by asking for a key (then the request is sent again). Same origin only:
// the page's connect-src policy allows nothing else.

const KEY_STORAGE = "schemabridge.apiKey";

export class ApiError extends Error {
  constructor(status, body) {
    const code = (body && body.code) || `http_${status}`;
    super((body && body.message) || `the API answered ${status}`);
    this.status = status;
    this.code = code;
    this.details = (body && body.details) || {};
  }
}

/** No answer from the API at all (the browser's "Failed to fetch": the API is stopped or
 * restarting, or the network between is down), said as a person would, with the address the
 * page was loaded from: the monitor is served by the API it calls. */
export class ApiUnreachable extends Error {
  constructor() {
    super(`the API at ${location.origin} is not answering (it may be restarting)`);
    this.code = "api_unreachable";
  }
}

/** What an operator reads when an action they sent (`name`: "Retry", "Reset", …) failed, after
 * "✕ ": a refusal is the API's words and code; no answer at all (the API stopped mid-action)
 * is not a refusal, and the action may have been done before the connection went: said so,
 * with where to look (a tour read "Retry refused: the API … is not answering" as nothing
 * done). */
export function failedAction(name, error) {
  if (error instanceof ApiUnreachable) {
    return `${name}: no answer — ${error.message}. Whether it was done is not known until the API answers again: look again then.`;
  }
  return `${name} refused: ${error.message}${error.code ? ` (${error.code})` : ""}`;
}

/** Draw the page anew after an action (`done`). When the API does not answer (it stopped
 * after answering the action) the page stays as it was, the action's answer saying what was
 * done: a redraw that got no answer does not make a done action a refusal. Thrown, it was an
 * error in the page. */
export async function redrawAfter(done) {
  try {
    await done();
  } catch (error) {
    if (!(error instanceof ApiUnreachable)) throw error;
  }
}

/** `send()`, with a request that got no answer thrown as `ApiUnreachable` (a request aborted
 * on purpose stays an AbortError). */
async function answered(send) {
  try {
    return await send();
  } catch (error) {
    if (error instanceof TypeError) throw new ApiUnreachable();
    throw error;
  }
}

let askForKey = null;

/** Register the function that asks the operator for an API key (resolves to the key or
 * null when they cancel). */
export function onKeyNeeded(ask) {
  askForKey = ask;
}

export function storedKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

/** Send `key` from now on (the operator chose another one, e.g. an admin key after a tenant
 * key was refused an admin page). */
export function useKey(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
  window.dispatchEvent(new Event(KEY_CHANGED));
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_STORAGE);
  window.dispatchEvent(new Event(KEY_CHANGED));
}

/** Fired on `window` when the key changes (a prompt answered, "Use another key…"): whatever
 * shows whom the key acts for reads it again, whichever request's 401 asked. */
export const KEY_CHANGED = "schemabridge:key-changed";

function headers(extra) {
  const all = { Accept: "application/json", ...extra };
  const key = storedKey();
  if (key) all.Authorization = `Bearer ${key}`;
  return all;
}

let asking = null;

/** One prompt at a time: requests refused together wait for the same answer. `refused`: why
 * the key sent was refused (null when none was sent). */
function keyFromOperator(refused) {
  if (!asking) {
    asking = askForKey(refused).finally(() => {
      asking = null;
    });
  }
  return asking;
}

async function authorised(send) {
  for (let tries = 0; tries < 3; tries++) {
    const sentWith = storedKey();
    const response = await send();
    if (response.status !== 401 || !askForKey) return response;
    if (storedKey() !== sentWith) continue; // another request got a new key meanwhile
    const key = await keyFromOperator(sentWith ? await refusal(response) : null);
    if (!key) return response;
    useKey(key);
  }
  return send();
}

/** The API's words for a 401 (its JSON `message`), read from a copy: the caller may still
 * read the answer itself. */
async function refusal(response) {
  try {
    const body = await response.clone().json();
    return body && body.message ? body.message : "the API answered 401";
  } catch {
    return "the API answered 401";
  }
}

/** Call the API: `await api("/runs?status=FAILED")`, `await api(path, {method, body})`. */
export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, signal, credentials: "same-origin", cache: "no-store" };
  const response = await authorised(() => {
    const extra = body === undefined ? {} : { "Content-Type": "application/json" };
    return answered(() =>
      fetch(path, {
        ...init,
        headers: headers(extra),
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
  });
  const text = await answered(() => response.text());
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { code: "not_json", message: text.slice(0, 200) };
    }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const found = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") found.set(name, String(value));
  }
  const text = found.toString();
  return text ? `?${text}` : "";
}

/** Follow a server-sent event stream with fetch (EventSource cannot send the API key).
 * Calls `onEvent(name, data)` per event; resolves when the stream closes, rejects on an
 * HTTP error. Stop it with `signal`. */
export async function stream(path, onEvent, signal) {
  const response = await authorised(() =>
    fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal, cache: "no-store" }),
  );
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new ApiError(response.status, body);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block, onEvent);
      end = buffer.indexOf("\n\n");
    }
  }
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // a heartbeat comment
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  let parsed;
  try {
    parsed = JSON.parse(data.join("\n"));
  } catch {
    return;
  }
  onEvent(name, parsed);
}
