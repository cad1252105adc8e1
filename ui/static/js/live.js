// Keeping a page current without hammering the API: a poller that calls its page's refresh at
// most once per interval (never faster than once a second), skips while the tab is hidden,
// and stops by itself once the page says nothing is running or nothing changed for a while —
// except on a list page, where new work can appear at any time: there it keeps looking, slowly.

import { h } from "./dom.js";
import { tickTimes } from "./format.js";

const MIN_INTERVAL_MS = 1000;

export class Poller {
  /**
   * `refresh()` reloads the page's data and returns {running, signature}: it stops when
   * `running` is false or the signature stayed the same `quietLimit` times in a row.
   * `indicator` (an element) shows whether updates are live, with a "Resume updates" button
   * while they are paused; when `refresh()` answers `ended` (a run or a deployment that ended)
   * it says so in `endedWords`, without a button: there is nothing live left to follow.
   * `idleIntervalMs`: instead of stopping when nothing runs, look again this often (a list
   * page, where a run or deployment started elsewhere must show up without a reload).
   */
  constructor(refresh, { intervalMs = 2000, quietLimit = 15, indicator = null, idleIntervalMs = null, endedWords = "run ended · up to date" } = {}) {
    this.refresh = refresh;
    this.endedWords = endedWords;
    this.intervalMs = Math.max(MIN_INTERVAL_MS, intervalMs);
    this.idleIntervalMs = idleIntervalMs === null ? null : Math.max(MIN_INTERVAL_MS, idleIntervalMs);
    this.watching = false;
    this.quietLimit = quietLimit;
    this.indicator = indicator;
    this.timer = null;
    this.quiet = 0;
    this.last = null;
    this.stopped = true;
  }

  start() {
    this.stopped = false;
    this.watching = false;
    this.quiet = 0;
    this.show("live");
    this.schedule();
  }

  /** Nothing runs now: stop, or with `idleIntervalMs` keep looking for new work, slowly. */
  idle() {
    if (this.idleIntervalMs === null) {
      this.stop("idle");
      return;
    }
    this.stopped = false;
    this.watching = true;
    this.show("idle");
    this.schedule();
  }

  /** Begin from the page's first load (`refresh()`'s answer): live updates while something
   * runs, else idle as above. */
  follow(outcome) {
    if (outcome.ended) this.stop("ended");
    else if (outcome.running) this.start();
    else this.idle();
  }

  stop(reason = null) {
    this.stopped = true;
    this.watching = false;
    clearTimeout(this.timer);
    this.timer = null;
    if (reason) this.show(reason);
  }

  schedule() {
    clearTimeout(this.timer);
    if (this.stopped) return;
    this.timer = setTimeout(() => this.tick(), this.watching ? this.idleIntervalMs : this.intervalMs);
  }

  async tick() {
    if (this.stopped) return;
    if (document.hidden) {
      this.schedule();
      return;
    }
    let outcome;
    try {
      outcome = await this.refresh();
    } catch (error) {
      this.stop(`paused: ${error.message}`);
      return;
    }
    if (this.stopped) return;
    const changed = outcome.signature !== this.last;
    this.last = outcome.signature;
    if (outcome.ended) {
      this.stop("ended");
      return;
    }
    if (!outcome.running) {
      this.idle();
      return;
    }
    if (this.watching) {
      // Slow looking found work that moves: live updates again; work that stands still
      // (a long call) is looked at slowly.
      if (changed) this.start();
      else this.schedule();
      return;
    }
    this.quiet = changed ? 0 : this.quiet + 1;
    if (this.quiet >= this.quietLimit) {
      if (this.idleIntervalMs !== null) this.idle();
      else this.stop("paused: nothing changed");
      return;
    }
    this.schedule();
  }

  /** "live", "idle" (up to date), "ended" (up to date for good: `endedWords`) or why the
   * updates paused. */
  show(state) {
    if (!this.indicator) return;
    const live = state === "live";
    const words = { live: "live", idle: "up to date", ended: this.endedWords };
    this.indicator.replaceChildren(
      h(
        "span",
        { class: live ? "live-on" : "live-off" },
        h("span", { "aria-hidden": "true" }, live ? "● " : "○ "),
        words[state] ?? state,
      ),
    );
    if (!live && state !== "ended" && !this.watching) {
      this.indicator.append(
        " ",
        h("button", { type: "button", class: "link", onclick: () => this.start() }, "Resume updates"),
      );
    }
  }
}

/** Run `fn` at most once per `ms`; calls in between are folded into one trailing call. */
export function throttle(fn, ms) {
  let last = 0;
  let pending = null;
  return (...args) => {
    const wait = last + ms - Date.now();
    if (wait <= 0) {
      last = Date.now();
      fn(...args);
    } else if (!pending) {
      pending = setTimeout(() => {
        pending = null;
        last = Date.now();
        fn(...args);
      }, wait);
    }
  };
}

/** A live page's clock: once a second (not while the tab is hidden) the relative times and
 * running durations under `root` move on (`tickTimes`: text nodes only), then `onTick()`
 * redraws what is drawn against now (a timeline's scale). The page's data comes from its
 * stream or poller; this only keeps what was read from reading as if no time passed. */
export class Ticker {
  constructor(root, { intervalMs = 1000, onTick = null } = {}) {
    this.root = root;
    this.intervalMs = intervalMs;
    this.onTick = onTick;
    this.timer = null;
  }

  get running() {
    return this.timer !== null;
  }

  start() {
    if (this.timer === null) this.timer = setInterval(() => this.tick(), this.intervalMs);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  tick() {
    if (document.hidden) return;
    tickTimes(this.root);
    if (this.onTick) this.onTick();
  }
}
