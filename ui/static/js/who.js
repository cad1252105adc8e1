// Whom the stored key acts for (`GET /keys/current`), read once per key and shared: the
// header says it, and the pages offer a tenant key nothing the admin routes would refuse it
// (403) — the admin pages in the nav, a link to a deployment or to a breaker's Reset, a
// Deploy or Publish button. The rule is `opensAdminPages`.

import { api, storedKey } from "./api.js";

let last = null; // {key, answer}: the read for the key stored when it was asked
let known = null; // {key, who}: the last answer, for the key stored when it came

/** The key as the API knows it ({id, name, role, tenantId, authentication}), or null when it
 * cannot be read; then it is read again at the next ask, and meanwhile everything is offered:
 * the last key's role would be a guess. */
export function whoIsIt() {
  const key = storedKey();
  if (last === null || last.key !== key) {
    const read = { key, answer: api("/keys/current").catch(() => null) };
    last = read;
    read.answer.then((who) => {
      // Kept for the key stored now, unless another key replaced the one it was sent with
      // (a first read, sent without a key, waits for the prompt's key and answers for it).
      if (read.key === null || read.key === storedKey()) known = { key: storedKey(), who };
      if (who === null && last === read) last = null;
    });
  }
  return last.answer;
}

/** `whoIsIt`'s answer for the stored key once it has come, else null: for what is drawn where
 * no promise can be waited for (a warning's link), after the page waited for `whoIsIt` or
 * after a click, so that the answer has come. */
export function whoIsKnown() {
  return known !== null && known.key === storedKey() ? known.who : null;
}

/** Whether `who` (`whoIsIt`'s answer) may open what the admin routes answer: any key but a
 * tenant key, and a key whose role could not be read (the API says 403 if it is wrong). */
export function opensAdminPages(who) {
  return !who || who.role !== "tenant";
}
