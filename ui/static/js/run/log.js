// The run's log, oldest first, followed while the run goes on (`after` the last line seen).

import { api, query } from "../api.js";
import { h } from "../dom.js";
import { exact, exactZoned, zoneName } from "../format.js";

const PAGE = 200;

export class RunLog {
  constructor(runId) {
    this.runId = runId;
    this.after = null;
    this.reading = null; // the read under way (`load`)
    this.queued = null; // the read that follows it, shared by the calls made meanwhile
    this.list = h("ol", { class: "log", "aria-label": "Run log" });
    this.more = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => this.load() }, "Load more");
    // Each line shows its clock time only; the heading says in which zone (and each line's
    // title its full time with its zone), as every other time the monitor shows as text.
    const zone = zoneName(Date.now() / 1000);
    const heading = h("h2", { id: "log-title" }, "Log", zone ? h("span", { class: "log-zone" }, ` · times in ${zone}`) : null);
    this.element = h("section", { "aria-labelledby": "log-title" }, heading, this.list, this.more);
  }

  /** Read the lines after the last one shown. One read at a time: the first render, a
   * reload and the live follow may ask at once, and two reads from the same cursor appended
   * the same lines twice ("lease expired; step requeued" shown twice, as if it had happened
   * twice). A call while a read runs gets one more read after it, shared by every call made
   * meanwhile, so no line written since is missed. */
  load() {
    if (this.queued) return this.queued;
    const running = this.reading;
    const read = (running ? running.catch(() => {}) : Promise.resolve()).then(() => {
      if (this.queued === read) this.queued = null;
      return this.readPage();
    });
    if (running) this.queued = read;
    this.reading = read;
    const settled = () => {
      if (this.reading === read) this.reading = null;
    };
    read.then(settled, settled);
    return read;
  }

  async readPage() {
    const page = await api(`/runs/${encodeURIComponent(this.runId)}/logs${query({ limit: PAGE, cursor: this.after })}`);
    for (const line of page.items) {
      this.list.append(
        h(
          "li",
          { class: `log-${line.level}` },
          h("time", { title: exactZoned(line.at), datetime: new Date(line.at * 1000).toISOString() }, exact(line.at).slice(11)),
          " ",
          h("span", { class: "log-level" }, line.level),
          line.vertexId ? h("span", { class: "log-vertex" }, ` ${line.vertexId}`) : null,
          " ",
          line.message,
        ),
      );
      this.after = String(line.id);
    }
    this.more.hidden = page.next === null;
    return page.items.length;
  }
}
