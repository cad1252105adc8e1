// The monitor's shell: a hash router (#/runs, #/runs/<id>, #/workflows/<name>, …) whose
// filters live in the URL so a view can be shared, and the API-key prompt.

import { ApiError, ApiUnreachable, KEY_CHANGED, onKeyNeeded, storedKey } from "./api.js";
import { askForKey, otherKeyButton } from "./dialog.js";
import { fill, h } from "./dom.js";
import { deploymentPage, deploymentsPage } from "./pages/deployments.js";
import { destinationsPage } from "./pages/destinations.js";
import { editorPage } from "./pages/editor.js";
import { runPage } from "./pages/run.js";
import { runsPage } from "./pages/runs.js";
import { servicesPage } from "./pages/services.js";
import { workflowPage, workflowsPage } from "./pages/workflows.js";
import { opensAdminPages, whoIsIt } from "./who.js";

const ROUTES = [
  [/^\/runs\/([^/]+)$/, "runs", runPage],
  [/^\/runs$/, "runs", runsPage],
  [/^\/workflows\/([^/]+)$/, "workflows", workflowPage],
  [/^\/workflows$/, "workflows", workflowsPage],
  [/^\/deployments\/([^/]+)$/, "deployments", deploymentPage],
  [/^\/deployments$/, "deployments", deploymentsPage],
  [/^\/editor$/, "editor", editorPage],
  [/^\/destinations$/, "destinations", destinationsPage],
  [/^\/services$/, "services", servicesPage],
];

let cleanup = null;
let shownPath = null;
let generation = 0;

/** The current route: {path, params} from "#/path?query". */
export function currentRoute() {
  const hash = location.hash.replace(/^#/, "") || "/runs";
  const [path, search = ""] = hash.split("?", 2);
  return { path, params: new URLSearchParams(search) };
}

/** Change the query of the current page (kept in the URL, so it can be shared). `render:
 * false` only records it (a history entry all the same): the page already shows it, and
 * Back draws the page anew from the URL as any hash change does. */
export function setParams(params, { replace = false, render: draw = true } = {}) {
  const { path } = currentRoute();
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  const next = `#${path}${text ? `?${text}` : ""}`;
  if (!draw && next === location.hash) return;
  if (replace) replaceUrl(next);
  else history.pushState(null, "", next);
  if (draw) render();
}

/** Replace the URL without a history entry or a redraw (a short id made whole). The page
 * shown is then that URL's: a redraw of it before the page has finished loading (a filter,
 * Back) is no move to another page, so it must not flash "Loading…". */
export function replaceUrl(hash) {
  history.replaceState(null, "", hash);
  shownPath = currentRoute().path;
}

/** How long the page waits before it loads again while the API does not answer: longer each
 * time, up to 30 s, so a restart is caught within seconds and an API down for long is not
 * asked once a second. */
const RELOAD_DELAYS_S = [2, 4, 8, 15, 30];
let unanswered = 0; // the loads in a row the API did not answer

/** The page could not be loaded because the API did not answer: say so in a sentence, and
 * load the page again by itself after a while (or at once with the button). What it returns
 * stops the wait, when another page is opened meanwhile. */
function showUnreachable(where, error) {
  const wait = RELOAD_DELAYS_S[Math.min(unanswered, RELOAD_DELAYS_S.length - 1)];
  unanswered += 1;
  const timer = setTimeout(render, wait * 1000);
  const again = h("button", { type: "button", class: "secondary" }, "Try again now");
  again.addEventListener("click", () => {
    clearTimeout(timer);
    render();
  });
  const sentence = error.message.charAt(0).toUpperCase() + error.message.slice(1);
  fill(
    where,
    h("div", { class: "error-box api-unreachable", role: "alert" }, h("p", {}, h("strong", {}, `${sentence}.`), ` This page tries again by itself in ${wait} s, and loads once the API answers.`), h("p", {}, again)),
  );
  return () => clearTimeout(timer);
}

export function showError(where, error) {
  const text = error instanceof ApiError ? `${error.message} (${error.code})` : String(error && error.message ? error.message : error);
  fill(where, h("div", { class: "error-box", role: "alert" }, h("strong", {}, "Could not load this page: "), text, otherKey(error)));
}

/** A page the key may not see (a tenant key on an admin page, 403) or a key that stopped
 * working (401, the prompt cancelled): the key is kept for the tab, so without this the only
 * way to another key was a new tab. */
function otherKey(error) {
  if (!(error instanceof ApiError) || (error.status !== 401 && error.status !== 403)) return null;
  return h("p", {}, otherKeyButton(render));
}

/** Offer the admin pages (marked data-admin) or not: a tenant key is refused them (403). */
function offerAdminPages(offer) {
  for (const link of document.querySelectorAll("nav a[data-admin]")) link.closest("li").hidden = !offer;
}

let readFor; // the key whom it acts for was last read with (undefined: none read yet)

/** Say in the header whom the stored key acts for ("tenant acme"), and offer a tenant key
 * only the pages it may open: the admin pages (marked data-admin) refuse it with 403. Read
 * once per key: at the first look and whenever the key changes (a 401 prompt, "Use another
 * key…"). A key that cannot be read is read again at the next look, and meanwhile every page
 * is offered and nobody is named: the last key's state would be a guess. */
async function showWho() {
  const key = storedKey();
  if (key === readFor) return;
  readFor = key;
  const who = await whoIsIt();
  if (who === null) {
    if (readFor === key) readFor = undefined;
    offerAdminPages(true);
    document.getElementById("who").hidden = true;
    return;
  }
  if (storedKey() !== key) return; // another key meanwhile: its own read shows it
  const tenant = !opensAdminPages(who);
  offerAdminPages(!tenant);
  const name = who.name ? ` · ${who.name}` : "";
  const said = !who.authentication ? "authentication off" : tenant ? `tenant ${who.tenantId}${name}` : `admin key${name}`;
  const label = document.getElementById("who");
  label.textContent = said;
  label.title = tenant ? `This key acts for tenant ${who.tenantId}: its runs only, no admin page` : who.authentication ? `Admin key ${who.id}` : "Every request acts as the admin demo";
  label.hidden = false;
}

async function render() {
  showWho();
  const { path, params } = currentRoute();
  const main = document.getElementById("main");
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const route = ROUTES.find(([pattern]) => pattern.test(path));
  for (const link of document.querySelectorAll("nav a")) {
    if (route && link.dataset.page === route[1]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!route) {
    fill(main, h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/runs" }, "Go to the runs.")));
    return;
  }
  const [pattern, , page] = route;
  const match = pattern.exec(path);
  const args = match.slice(1).map(decodeURIComponent);
  // Moving to another page puts the focus on its content (as a page load would put it at the
  // top); the first page keeps the browser's own start, so Tab reaches the skip link first.
  const movedPage = shownPath !== null && shownPath !== path;
  shownPath = path;
  // A dialog asks about the page it was opened on: leaving that page cancels it, or it would
  // stay modal over the next page, offering an action on what is no longer shown.
  if (movedPage) for (const open of document.querySelectorAll("dialog[open]")) open.close("cancel");
  // The page left goes at once, as on the first load: it stayed in sight under the next
  // page's URL and tab until that page had read the API (seconds on a slow link), its
  // buttons live, so a Retry pressed then acted on the run left, not the one opened.
  if (movedPage) fill(main, h("p", { class: "muted page-loading", role: "status" }, "Loading…"));
  const mine = ++generation;
  try {
    const stop = (await page(main, params, ...args)) || null;
    if (mine === generation) {
      cleanup = stop;
      unanswered = 0;
    } else if (stop) stop(); // another page was asked for meanwhile
  } catch (error) {
    if (mine === generation && error instanceof ApiUnreachable) cleanup = showUnreachable(main, error);
    else if (mine === generation) showError(main, error);
  }
  if (movedPage) main.focus({ preventScroll: true });
}

onKeyNeeded(askForKey);
window.addEventListener(KEY_CHANGED, showWho);
window.addEventListener("hashchange", render);
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", render);
else render();
