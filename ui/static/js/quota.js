// A tenant's run quota, as Retry's dialogs warn about it: a fan-out that failed because its
// tenant's quota was used up (error kind `quota_exceeded`) fails the same way when retried
// alone, since the quota counts the runs a tenant created, which waiting does not lower. The
// fix is an admin's `schemabridge tenants set-quota T N` (the monitor has no tenant settings
// of its own to point to).

import { api } from "./api.js";
import { h } from "./dom.js";
import { count, plural } from "./format.js";

/** The command a spawner's `quota_exceeded` error names (schemas/errors.py,
 * SET_QUOTA_COMMAND): the quota its fan-out needed when it failed. */
export const SET_QUOTA_COMMAND = /`(schemabridge tenants set-quota [^`]+ \d+)`/;

/** How many runs the fan-out still had to create (vertices/spawner.py, _quota_exceeded). */
const NEEDS = /the fan-out needs (\d+) runs?\b/;

/** `value` as one word of a POSIX shell, as Python's `shlex.quote` writes it (the API's own
 * commands are written with it). */
export function shellWord(value) {
  const text = String(value);
  if (text === "") return "''";
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(text)) return text;
  return `'${text.replaceAll("'", `'"'"'`)}'`;
}

/** The command that sets `tenant`'s run quota to `maxRuns` (`N` when it is not known). */
export function setQuotaCommand(tenant, maxRuns = "N") {
  return `schemabridge tenants set-quota ${shellWord(tenant)} ${maxRuns}`;
}

/** What a `quota_exceeded` error says: the runs its fan-out needed, the quota it named (null
 * for what an older API's message does not say). */
function quotaFailure(error) {
  const message = error.message || "";
  const needs = NEEDS.exec(message);
  const named = SET_QUOTA_COMMAND.exec(message);
  return {
    missing: needs ? Number(needs[1]) : null,
    quota: named ? Number(named[1].split(" ").pop()) : null,
  };
}

/** The selected FAILED runs whose fan-out failed for their tenant's run quota, by tenant. */
function quotaFailuresByTenant(runs) {
  const tenants = new Map();
  for (const run of runs) {
    if (run.status !== "FAILED" || run.error?.kind !== "quota_exceeded") continue;
    const failures = tenants.get(run.tenantId) ?? [];
    failures.push(quotaFailure(run.error));
    tenants.set(run.tenantId, failures);
  }
  return tenants;
}

/** One tenant whose selected runs failed for its quota, as the API reads it now: whether it
 * is still over its quota for them, and the command that raises it enough for all of them. */
async function tenantShortfall(tenant, failures) {
  const known = failures.every((f) => f.missing !== null);
  const missing = known ? failures.reduce((sum, f) => sum + f.missing, 0) : null;
  const named = failures.map((f) => f.quota).filter((q) => q !== null);
  let quota;
  try {
    quota = (await api(`/tenants/${encodeURIComponent(tenant)}`)).quota;
  } catch {
    // Not readable now: say what the errors said, as the run's own dialog does.
    const command = setQuotaCommand(tenant, failures.length === 1 && named.length ? named[0] : "N");
    return { tenant, runs: failures.length, over: true, missing: null, left: null, command };
  }
  if (!quota) return { tenant, runs: failures.length, over: false }; // no quota any more
  const over = missing === null || quota.runsLeft < missing;
  const command = setQuotaCommand(tenant, missing === null ? "N" : quota.usedRuns + missing);
  return { tenant, runs: failures.length, over, missing, left: quota.runsLeft, command };
}

function tenantLine(shortfall) {
  const { tenant, runs, missing, left, command } = shortfall;
  const needs = runs === 1 ? "its fan-out needs" : "their fan-outs need";
  const figures = missing === null ? "" : ` (${needs} ${plural(missing, "run")}, ${count(left)} ${left === 1 ? "is" : "are"} left)`;
  return h("li", {}, `tenant ${tenant}, ${plural(runs, "run")}${figures}: `, h("code", {}, command));
}

/** What the batch Retry's dialog says first when some of `runs` (the selected ones) failed
 * for a tenant's run quota that is still too small for them: each such tenant with the
 * command that raises its quota to its used runs plus what their fan-outs need. Null when
 * none is (a quota raised or removed since is not named). Tenants in the order of their
 * ids; reads `GET /tenants/{id}` once per such tenant. */
export async function batchQuotaNote(runs) {
  const tenants = quotaFailuresByTenant(runs);
  if (!tenants.size) return null;
  const sorted = [...tenants].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const found = await Promise.all(sorted.map(([tenant, failures]) => tenantShortfall(tenant, failures)));
  const over = found.filter((s) => s.over);
  if (!over.length) return null;
  const stuck = over.reduce((sum, s) => sum + s.runs, 0);
  const [its, them] = stuck === 1 ? ["its", "it"] : ["their", "them"];
  return [
    h(
      "p",
      {},
      `⚠ ${count(stuck)} of the selected runs failed because ${its} tenant's run quota is used up: the quota counts the runs a tenant created, so retrying ${them} alone fails the same way. An admin raises the quota first, with`,
    ),
    h("ul", { class: "quota-tenants" }, over.map(tenantLine)),
  ];
}
