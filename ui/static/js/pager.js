// "← Previous" and "Next →" under a list the API reads a page at a time (`next`, a cursor),
// the page's cursor kept in the URL so it can be shared. The API pages forward only, so
// "Previous" goes back through the cursors this tab followed, one trail per list, kept in the
// tab's sessionStorage: a reload on page 40 (or Back after one) still knows page 39. A page
// opened from a link, whose earlier pages this tab never read, offers "First page" instead:
// "← Previous" there led to page 1 without saying so.

import { currentRoute, setParams } from "./app.js";
import { fill, h } from "./dom.js";
import { plural } from "./format.js";

const STORE = "schemabridge.pageTrails";
const MOST_LISTS = 20; // the lists whose trails a tab keeps (a run's children are one each)
const MOST_PAGES = 500; // the cursors kept of one trail: its earliest are let go first

function stored() {
  try {
    const found = JSON.parse(sessionStorage.getItem(STORE) || "{}");
    return found && typeof found === "object" && !Array.isArray(found) ? found : {};
  } catch {
    return {};
  }
}

/** The cursors `list` paged through, page 1's (null) first. */
export function readTrail(list) {
  const trail = stored()[list];
  return Array.isArray(trail) ? trail : [];
}

/** Keep `trail` as the cursors `list` paged through, the list used last kept longest. */
export function keepTrail(list, trail) {
  const all = stored();
  delete all[list];
  all[list] = trail.slice(-MOST_PAGES);
  const lists = Object.keys(all);
  for (const old of lists.slice(0, Math.max(0, lists.length - MOST_LISTS))) delete all[old];
  try {
    sessionStorage.setItem(STORE, JSON.stringify(all));
  } catch {
    // Storage full or refused: "Previous" then offers the first page, as from a link.
  }
}

/** Where "back" goes from `cursor` in `trail`: the cursor before it (null: page 1), or
 * undefined when this tab did not page to it (a link, a trail let go). */
export function cursorBefore(trail, cursor) {
  const at = trail.indexOf(cursor);
  return at > 0 ? trail[at - 1] : undefined;
}

/** Forget the pages `list` followed: its filter changed, and its first page is another. */
export function restartPages(list) {
  keepTrail(list, []);
}

/** The button back from `cursor`: "← Previous" when the page before is known, else "First
 * page" (disabled on page 1). `go(cursor)` opens a page. */
export function backButton(trail, cursor, go) {
  const before = cursorBefore(trail, cursor);
  const known = before !== undefined;
  return h(
    "button",
    { type: "button", class: "secondary", disabled: cursor === null, title: known || cursor === null ? null : "This tab did not page here: back to the list's first page", onclick: () => go(known ? before : null) },
    known || cursor === null ? "← Previous" : "⇤ First page",
  );
}

/** Fill `element` with the pager of `page` (`{items, next}`), shown from `cursor` (null: the
 * first page); `noun` counts the rows ("run", "deployment"). */
export function drawPager(element, list, cursor, page, noun) {
  const trail = readTrail(list);
  const at = trail.indexOf(cursor);
  // The trail up to this page: paged to, or (from a link) this page alone, so that Next then
  // Previous comes back here.
  const here = at >= 0 ? trail.slice(0, at + 1) : [cursor];
  fill(
    element,
    backButton(trail, cursor, go),
    h("span", { class: "muted" }, `${plural(page.items.length, noun)} on this page`),
    h("button", { type: "button", class: "secondary", disabled: !page.next, onclick: () => (keepTrail(list, [...here, page.next]), go(page.next)) }, "Next →"),
  );
}

function go(cursor) {
  const current = Object.fromEntries(currentRoute().params);
  setParams({ ...current, cursor });
}
