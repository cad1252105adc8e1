// The short ids the pages show (an id's first 8 characters), pasted into a URL: a run's or a
// deployment's page resolves one to the whole id through the API (`GET /run-ids`,
// `GET /deployment-ids`) before it loads.

import { ApiError, api, query } from "./api.js";
import { currentRoute, replaceUrl } from "./app.js";
import { fill, h } from "./dom.js";

const ID_CHARS = 36;
const SHORT_ID = /^(?:-*[0-9a-fA-F]){8,32}-*$/;

export const RUNS = { path: "runs", lookup: "/run-ids", noun: "run" };
export const DEPLOYMENTS = { path: "deployments", lookup: "/deployment-ids", noun: "deployment" };

/** The whole id `given` names on a page of `kind` (RUNS, DEPLOYMENTS): itself, or the one id
 * that starts with it, which then replaces it in the URL (what a reload or a shared link
 * names). No id starts with it: `<noun>_not_found`. Several do: the page lists them and
 * this answers null; null too when the user left the page before the lookup answered. */
export async function wholeId(main, params, given, kind) {
  if (given.length >= ID_CHARS || !SHORT_ID.test(given)) return given;
  const found = await api(`${kind.lookup}${query({ prefix: given, limit: 5 })}`);
  // A user who moved on meanwhile keeps the page they asked for: this page draws nothing
  // and leaves the URL alone (its render is discarded).
  if (currentRoute().path !== `/${kind.path}/${given}`) return null;
  if (found.ids.length === 0) {
    throw new ApiError(404, { code: `${kind.noun}_not_found`, message: `no ${kind.noun} id starts with ${given}` });
  }
  if (found.ids.length > 1 || found.more) {
    const count = found.more ? `More than ${found.ids.length}` : String(found.ids.length);
    fill(
      main,
      h("h1", {}, `Which ${kind.noun}?`),
      h("p", {}, `${count} ${kind.noun}s have an id starting with ${given}:`),
      h("ul", { class: "id-matches" }, ...found.ids.map((id) => h("li", {}, h("a", { href: `#/${kind.path}/${id}` }, id)))),
    );
    return null;
  }
  const [id] = found.ids;
  const search = params.toString();
  replaceUrl(`#/${kind.path}/${encodeURIComponent(id)}${search ? `?${search}` : ""}`);
  return id;
}
