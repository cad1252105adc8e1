// "← Previous" and "Next →" under a list the API reads a page at a time (`next`, a cursor),
// the page's cursor kept in the URL so it can be shared. The API pages forward only, so
// "Previous" goes back through the cursors this tab followed, one stack per list.

import { currentRoute, setParams } from "./app.js";
import { fill, h } from "./dom.js";
import { plural } from "./format.js";

const followed = new Map();

function stack(list) {
  if (!followed.has(list)) followed.set(list, []);
  return followed.get(list);
}

/** Forget the pages `list` followed: its filter changed, and its first page is another. */
export function restartPages(list) {
  stack(list).length = 0;
}

/** Fill `element` with the pager of `page` (`{items, next}`), shown from `cursor` (null: the
 * first page); `noun` counts the rows ("run", "deployment"). */
export function drawPager(element, list, cursor, page, noun) {
  const previous = stack(list);
  fill(
    element,
    h("button", { type: "button", class: "secondary", disabled: !cursor, onclick: () => go(previous.pop() ?? null) }, "← Previous"),
    h("span", { class: "muted" }, `${plural(page.items.length, noun)} on this page`),
    h("button", { type: "button", class: "secondary", disabled: !page.next, onclick: () => (previous.push(cursor), go(page.next)) }, "Next →"),
  );
}

function go(cursor) {
  const current = Object.fromEntries(currentRoute().params);
  setParams({ ...current, cursor });
}
