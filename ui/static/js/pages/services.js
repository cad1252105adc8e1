// Services: every API, worker and serve process that sent a heartbeat, up while it is fresh,
// with its role (which of those kinds of process it is; "unknown" from a heartbeat written
// before beats said it), its host and pid (a service down: those of its last beat, to find its process), its
// uptime since its process started (when, on hover).

import { api } from "../api.js";
import { fill, h } from "../dom.js";
import { breakable, duration, exact, time } from "../format.js";
import { Poller } from "../live.js";

// What kind of process it is; a heartbeat of an older release does not say.
const role = (service) => service.role || "unknown";

export async function servicesPage(main) {
  const live = h("span", { class: "live" });
  const body = h("tbody");

  async function refresh() {
    const found = await api("/services");
    fill(
      body,
      found.items.length
        ? found.items.map((service) =>
            h(
              "tr",
              { class: service.up ? null : "row-failed" },
              h("td", { class: "mono" }, breakable(service.name), service.host ? h("span", { class: "host-under muted" }, breakable(service.host)) : null),
              h("td", {}, h("span", { class: `badge ${service.up ? "st-succeeded" : "st-failed"}` }, h("span", { "aria-hidden": "true" }, service.up ? "▲ " : "▼ "), service.up ? "up" : "down"), h("span", { class: "role-under muted" }, role(service))),
              h("td", { class: service.role ? null : "muted" }, role(service)),
              h("td", { class: "mono" }, service.host ? breakable(service.host) : "—"),
              h("td", {}, service.pid ? String(service.pid) : "—"),
              h("td", { title: service.startedAt ? `started ${exact(service.startedAt)}` : null }, duration(service.uptimeS)),
              h("td", {}, time(service.lastSeen)),
            ),
          )
        : h("tr", {}, h("td", { colspan: "7", class: "empty" }, "No service has sent a heartbeat yet.")),
    );
    return { running: true, signature: JSON.stringify(found.items.map((s) => [s.name, s.up, s.role])) };
  }

  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Services"), live),
    h("p", { class: "muted" }, "Each service sends a heartbeat every few seconds; one that stops for longer than its time-to-live shows as down, with the host and PID it last beat from."),
    h("div", { class: "table-wrap" }, h("table", { class: "services" }, h("thead", {}, h("tr", {}, ["Service", "State", "Role", "Host", "PID", "Uptime", "Last heartbeat"].map((t) => h("th", { scope: "col" }, t)))), body)),
  );
  const poller = new Poller(refresh, { intervalMs: 5000, quietLimit: 24, indicator: live });
  await refresh();
  poller.start();
  return () => poller.stop();
}
