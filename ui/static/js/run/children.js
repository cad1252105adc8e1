// A run's children, a page at a time (keyset cursors: page 2,000 of a 100,000-child fan-out
// costs what page 1 does), filtered by status. The filter and the page's cursor are in the
// run page's URL (`?children=FAILED&cursor=…`): Back from a child lands on the same page of
// the same filter, and "the failed children of run X" is a link.

import { api, ApiError, query } from "../api.js";
import { currentRoute, setParams } from "../app.js";
import { fill, h } from "../dom.js";
import { badge, errorSummary, liveDuration, shortId, time } from "../format.js";
import { keepTrail, readTrail } from "../pager.js";

const PAGE = 50;
// The statuses REST filters on; a waiting child is RUNNING, so "running" lists the fan-out
// bar's running and waiting children together, each row saying which.
const FILTERS = [
  ["", "any status"],
  ["RUNNING", "running or waiting"],
  ["FAILED", "failed"],
  ["SUCCEEDED", "succeeded"],
  ["CANCELLED", "cancelled"],
];

// The cursors of the pages paged through, per run and filter, page 1's (null) first, kept
// for the tab (`pager.js`): the page is drawn anew from its URL on Back or a reload, and
// "← Previous" still knows the page before.

export class ChildrenList {
  constructor(runId, status = "", cursor = null) {
    this.runId = runId;
    this.status = FILTERS.some(([value]) => value === status) ? status : "";
    this.cursor = cursor || null;
    const trail = readTrail(this.trailKey);
    const at = trail.indexOf(this.cursor);
    // A cursor from a shared link (no trail): the pages before it are not known, and the
    // button back goes to page 1, saying so ("First page").
    this.previous = at >= 0 ? trail.slice(0, at) : [];
    this.readAt = null;
    // The rows are read on their own, less often than the fan-out's bar moves: say when.
    this.readLabel = h("span", { class: "muted read-at" });
    this.page = { items: [], next: null };
    this.body = h("tbody");
    this.pager = h("div", { class: "pager" });
    this.element = h(
      "section",
      { class: "children", "aria-labelledby": "children-title" },
      h("h2", { id: "children-title" }, "Children"),
      h(
        "div",
        { class: "filters" },
        h(
          "label",
          {},
          "Status",
          h(
            "select",
            { name: "child-status", onchange: (event) => this.filter(event.target.value) },
            FILTERS.map(([value, label]) => h("option", { value, selected: value === this.status }, label)),
          ),
        ),
        this.readLabel,
      ),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "children-table row-blocks" },
          h("thead", {}, h("tr", {}, ["Item", "Status", "Run", "Started", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))),
          this.body,
        ),
      ),
      this.pager,
    );
  }

  get trailKey() {
    return `children ${this.runId} ${this.status}`;
  }

  /** Put the filter and the cursor in the URL (a history entry, so Back returns here) without
   * drawing the run page anew: this list loads the page itself. */
  remember() {
    keepTrail(this.trailKey, [...this.previous, this.cursor]);
    const params = Object.fromEntries(currentRoute().params);
    setParams({ ...params, children: this.status, cursor: this.cursor }, { render: false });
  }

  async filter(status) {
    this.status = status;
    this.cursor = null;
    this.previous = [];
    this.remember();
    await this.load();
  }

  async load() {
    const path = `/runs/${encodeURIComponent(this.runId)}/children${query({ status: this.status, limit: PAGE, cursor: this.cursor })}`;
    try {
      this.page = await api(path);
    } catch (error) {
      // A cursor edited in the URL, or of another filter: page 1 rather than no run page.
      if (!(error instanceof ApiError) || error.code !== "invalid_cursor" || this.cursor === null) throw error;
      this.cursor = null;
      this.previous = [];
      setParams({ ...Object.fromEntries(currentRoute().params), cursor: null }, { replace: true, render: false });
      return this.load();
    }
    this.readAt = Date.now() / 1000;
    this.draw();
    return this.page;
  }

  get onFirstPage() {
    return this.cursor === null;
  }

  /** Whether the page before this one is known (paged to in this tab), or only page 1. */
  get knowsPrevious() {
    return this.onFirstPage || this.previous.length > 0;
  }

  draw() {
    const rows = this.page.items.map((run) =>
      h(
        "tr",
        { class: run.status === "FAILED" ? "row-failed" : null },
        // In a box narrower than a desktop's (a tablet, a phone) each child is a block, its
        // cells side by side, each named by its `data-label`, and its error under them
        // (style.css, `row-blocks`).
        h("td", { "data-label": "Item" }, String(run.itemIndex)),
        h("td", { "data-label": "Status" }, badge(run.waiting ? "WAITING" : run.status)),
        h("td", { "data-label": "Run" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono" }, shortId(run.id))),
        h("td", { "data-label": "Started" }, time(run.startedAt)),
        h("td", { "data-label": "Duration" }, liveDuration(run.startedAt, run.endedAt)),
        h("td", { class: "error-line" }, errorSummary(run.error)),
      ),
    );
    fill(this.body, rows.length ? rows : h("tr", {}, h("td", { colspan: "6", class: "empty" }, "No children here.")));
    const first = this.page.items[0];
    const last = this.page.items[this.page.items.length - 1];
    fill(
      this.pager,
      h(
        "button",
        { type: "button", class: "secondary", disabled: this.onFirstPage, title: this.knowsPrevious ? null : "This tab did not page here: back to the first page", onclick: () => this.back() },
        this.knowsPrevious ? "← Previous" : "⇤ First page",
      ),
      h("span", { class: "muted page-range" }, first ? `items ${first.itemIndex} … ${last.itemIndex}` : ""),
      h("button", { type: "button", class: "secondary", disabled: !this.page.next, onclick: () => this.forward() }, "Next →"),
    );
    fill(this.readLabel, "Read ", time(this.readAt));
  }

  async forward() {
    this.previous.push(this.cursor);
    this.cursor = this.page.next;
    this.remember();
    await this.load();
  }

  async back() {
    this.cursor = this.previous.pop() ?? null;
    this.remember();
    await this.load();
  }
}
