"""The monitor with authentication on (`schemabridge serve`, no --demo): the page loads, the API
answers 401, the page asks for a key, keeps it in the tab's sessionStorage and sends it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.browser_harness import (
    NARROW,
    SCREENSHOTS,
    chromium,
    eventually,
    opened,
    server_env,
    shoot,
)
from tests.e2e.rest_harness import Service, schemabridge, upgraded

pytestmark = pytest.mark.slow


def _key(env: dict[str, str], *scope: str) -> str:
    created = schemabridge(env, "keys", "create", *scope, "--name", "ui")
    assert created.returncode == 0, created.stderr
    return created.stdout.strip().splitlines()[-1]


def give_key(page: Any, key: str) -> None:
    """Answer the monitor's "API key needed" prompt with `key`."""
    dialog = page.locator("dialog.modal")
    dialog.get_by_role("heading", name="API key needed").wait_for()
    page.fill("#api-key", key)
    dialog.get_by_role("button", name="Use this key").click()


TENANT_KEY: dict[str, str] = {}
"""The secured server's tenant key (acme), once the module's server has made it."""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp("auth")
    env = server_env(workdir, f"sqlite+aiosqlite:///{workdir / 'sb.db'}")
    env["SCHEMABRIDGE_EGRESS_ALLOW"] = "127.0.0.0/8"  # a workflow calling a closed loopback port
    upgraded(env)
    key = _key(env, "--admin")
    TENANT_KEY["acme"] = _key(env, "--tenant", "acme")
    service = Service(["serve", "--port", "0", "--no-access-log"], env, workdir / "serve.log")
    try:
        yield service.wait_for_url(), key
    finally:
        assert service.stop() == 0


@pytest.fixture(scope="module")
def browser(secured: tuple[str, str]) -> Iterator[Any]:
    with chromium() as found:
        yield found


def test_the_page_asks_for_a_key_and_keeps_it_in_the_tab(
    secured: tuple[str, str], browser: Any
) -> None:
    url, key = secured
    with opened(browser, f"{url}/ui/#/runs") as (page, watch):
        # The refused requests are the point here; Chromium logs each 401 as an error.
        watch.allowed_errors.append("status of 401")
        dialog = page.locator("dialog.modal")
        dialog.get_by_role("heading", name="API key needed").wait_for()
        assert dialog.locator(".key-refused").count() == 0, "no key was given yet"
        # A newcomer on a fresh `serve` has no key: the dialog says how to make one.
        howto = dialog.locator(".key-howto").inner_text()
        assert "schemabridge keys create --admin --name me" in howto
        shoot(page, "api-key-dialog", narrow=False)
        page.fill("#api-key", "sbk_wrong")
        dialog.get_by_role("button", name="Use this key").click()
        # Asked again, saying why: the same dialog alone looked as if nothing had happened.
        refused = dialog.locator(".key-refused")
        refused.wait_for()
        assert "The key given was refused: " in refused.inner_text()
        assert "unknown, revoked or expired" in refused.inner_text()
        shoot(page, "api-key-refused", narrow=False)
        # Enter in the field uses the key (the tour: it pressed the form's first button,
        # Cancel, and the page said a key was required).
        page.fill("#api-key", key)
        page.press("#api-key", "Enter")
        page.get_by_role("heading", name="Runs").wait_for()
        page.locator("td.empty", has_text="No runs match").wait_for()
        assert page.evaluate("sessionStorage.getItem('schemabridge.apiKey')") == key
        assert page.evaluate("localStorage.length") == 0
        # Only a demo server says what to try (it names no key to make; this one needs one).
        assert page.evaluate("async () => (await import('./js/demo.js')).demoHint()") is None
        assert page.locator("aside.demo-hint").count() == 0
        page.get_by_role("link", name="Services").click()
        page.locator("tbody tr td.mono").first.wait_for()  # no second prompt: the key is kept
        assert page.locator("dialog.modal").count() == 0


def test_a_tenant_key_refused_an_admin_page_can_give_way_to_another_key(
    secured: tuple[str, str], browser: Any
) -> None:
    """The key is kept for the tab: a tenant key on an admin page (Deployments, 403) offers
    another key right there, and the page loads with it."""
    url, admin_key = secured
    with opened(browser, f"{url}/ui/#/deployments") as (page, watch):
        watch.allowed_errors.extend(["status of 401", "status of 403"])
        give_key(page, TENANT_KEY["acme"])
        refused = page.locator(".error-box", has_text="this route needs an admin key")
        refused.wait_for()
        # The header says whom the key acts for, and offers no page it would be refused.
        who = page.locator("#who")
        who.get_by_text("tenant acme · ui").wait_for()
        nav = page.get_by_role("navigation", name="Pages")
        assert nav.get_by_role("link").all_inner_texts() == ["Runs", "Workflows", "Editor"]
        shoot(page, "admin-page-tenant-key")
        refused.get_by_role("button", name="Use another key…").click()
        give_key(page, admin_key)
        page.get_by_role("heading", name="Deployments").wait_for()
        assert page.locator(".error-box").count() == 0
        who.get_by_text("admin key · ui").wait_for()
        links = nav.get_by_role("link").all_inner_texts()
        assert links == ["Runs", "Workflows", "Deployments", "Editor", "Destinations", "Services"]
        assert page.evaluate("sessionStorage.getItem('schemabridge.apiKey')") == admin_key


def _same_origin_only(page: Any, url: str) -> Callable[[], list[str]]:
    """Record every request `page` makes; what it returns lists those off `url`'s origin."""
    made: list[str] = []
    page.on("request", lambda request: made.append(request.url))
    origin = f"{url}/"
    return lambda: [m for m in made if not m.startswith((origin, "data:", "blob:"))]


def test_the_api_reference_renders_with_no_way_out(secured: tuple[str, str], browser: Any) -> None:
    """`/docs` (Swagger UI) and `/redoc` (ReDoc) have their scripts served by the API, and
    every request either page makes goes to the API: `opened` fails any request that would
    leave loopback (ReDoc's sidebar once fetched its logo from cdn.redoc.ly), and the pages
    still list the routes."""
    url, _ = secured
    with opened(browser, "about:blank") as (page, _):
        elsewhere = _same_origin_only(page, url)
        page.goto(f"{url}/docs")
        page.locator(".opblock-summary-path", has_text="/workflows/{name}/runs").first.wait_for()
        shoot(page, "api-reference", narrow=False)
        page.goto(f"{url}/redoc")
        page.get_by_text("API docs by Redocly").wait_for()
        page.locator("[data-section-id]").first.wait_for()
        page.wait_for_load_state("networkidle")
        # ReDoc's page is too long for a full-page screenshot: what shows of it, wide then narrow.
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "api-reference-redoc.png"))
        page.set_viewport_size(NARROW)
        page.screenshot(path=str(SCREENSHOTS / "api-reference-redoc-narrow.png"))
        assert elsewhere() == []


def test_a_key_whose_role_cannot_be_read_is_offered_every_page(
    secured: tuple[str, str], browser: Any
) -> None:
    """A tenant key's nav hides the admin pages; when the next key's `GET /keys/current`
    fails (503 here, answered by the browser), the nav does not keep the last key's state: it
    offers every page and names nobody."""
    url, admin_key = secured
    with opened(browser, f"{url}/ui/#/runs") as (page, watch):
        watch.allowed_errors.extend(["status of 401", "status of 403", "status of 503"])
        give_key(page, TENANT_KEY["acme"])
        who = page.locator("#who")
        who.get_by_text("tenant acme · ui").wait_for()
        nav = page.get_by_role("navigation", name="Pages")
        assert nav.get_by_role("link").all_inner_texts() == ["Runs", "Workflows", "Editor"]

        unavailable = {"code": "database_unavailable", "message": "the database is down"}
        page.route(
            "**/keys/current",
            lambda route: route.fulfill(status=503, json=unavailable),
        )
        page.goto(f"{url}/ui/#/deployments")
        refused = page.locator(".error-box", has_text="this route needs an admin key")
        refused.get_by_role("button", name="Use another key…").click()
        give_key(page, admin_key)
        page.get_by_role("heading", name="Deployments").wait_for()
        who.wait_for(state="hidden")
        links = nav.get_by_role("link").all_inner_texts()
        assert links == ["Runs", "Workflows", "Deployments", "Editor", "Destinations", "Services"]


def test_a_tenant_key_starts_a_run_for_its_tenant(secured: tuple[str, str], browser: Any) -> None:
    """The workflow page's "Start a run" leaves the tenant to the key: a tenant key's run is its
    tenant's (the field said `default`, which the API refuses to every tenant key)."""
    url, admin_key = secured
    document = {
        "name": "ui-tenant-start",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/never"}}},
    }
    auth = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=url, headers=auth, trust_env=False, timeout=30) as http:
        assert http.post("/workflows", json=document).status_code in (200, 201)
        with opened(browser, f"{url}/ui/#/workflows/ui-tenant-start") as (page, watch):
            # 401 before the key; no 403: the page asks a tenant key nothing an admin's.
            watch.allowed_errors.append("status of 401")
            give_key(page, TENANT_KEY["acme"])
            assert page.locator("#run-tenant").input_value() == ""
            page.get_by_role("button", name="Start a run of v1").click()
            page.wait_for_url("**#/runs/*")
            run_id = page.url.rsplit("/", 1)[-1]
        assert http.get(f"/runs/{run_id}").json()["tenantId"] == "acme"


def test_the_editor_tells_a_tenant_key_publishing_needs_an_admin_key(
    secured: tuple[str, str], browser: Any
) -> None:
    """A tenant key checks documents in the editor but may not publish (403): Publish is shown
    disabled with the reason and another key a click away; with an admin key the document
    typed is still there, and publishes."""
    url, admin_key = secured
    text = '{"name": "ui-editor-key", "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/x"}}}}'
    with opened(browser, f"{url}/ui/#/editor") as (page, watch):
        watch.allowed_errors.append("status of 401")  # no 403: nothing is sent to be refused
        give_key(page, TENANT_KEY["acme"])
        page.fill("#document", text)
        page.locator("figcaption", has_text="ui-editor-key").wait_for()  # the text typed, checked
        page.locator(".editor-state.ok", has_text="✓ Valid.").wait_for()
        publish = page.get_by_role("button", name="Publish")
        assert publish.is_disabled(), "a tenant key is offered no publish"
        reason = page.locator(".publish-needs-admin")
        assert reason.inner_text().startswith("Publishing needs an admin key"), reason.inner_text()
        assert publish.get_attribute("aria-describedby") == "publish-needs-admin"
        shoot(page, "editor-tenant-key")
        reason.get_by_role("button", name="Use another key…").click()
        give_key(page, admin_key)
        page.locator("#who").get_by_text("admin key · ui").wait_for()
        page.locator(".editor-state.ok", has_text="✓ Valid: ready to publish.").wait_for()
        assert reason.is_hidden()
        assert page.locator("#document").input_value() == text
        publish.click()
        page.locator("dialog.modal").get_by_role("button", name="Publish").click()
        page.locator(".ok-box", has_text="Published: ui-editor-key v1").wait_for()


def test_a_publish_refused_gives_way_to_another_key_keeping_the_document(
    secured: tuple[str, str], browser: Any
) -> None:
    """A key whose role cannot be read (`GET /keys/current` fails: 503 here, answered by the
    browser) is offered Publish; the API refuses a tenant key (403), and the refusal offers
    another key right there, the document typed still there to publish with it."""
    url, admin_key = secured
    call = {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/x"}}
    text = json.dumps({"name": "ui-editor-refused", "vertices": {"call": call}})
    unavailable = {"code": "database_unavailable", "message": "the database is down"}
    with opened(browser, f"{url}/ui/#/editor") as (page, watch):
        watch.allowed_errors.extend(["status of 401", "status of 403", "status of 503"])
        page.route("**/keys/current", lambda route: route.fulfill(status=503, json=unavailable))
        give_key(page, TENANT_KEY["acme"])
        page.locator(".editor-state.ok").wait_for()  # the sample document, checked
        page.fill("#document", text)
        # At once, before the pause after typing is over: the text shown is what is published.
        page.get_by_role("button", name="Publish").click()
        page.locator("dialog.modal").get_by_role("button", name="Publish").click()
        refused = page.locator(".error-box", has_text="Publish refused")
        refused.get_by_role("button", name="Use another key…").click()
        give_key(page, admin_key)
        page.get_by_text("Key changed: publish again.").wait_for()
        assert page.locator("#document").input_value() == text
        page.get_by_role("button", name="Publish").click()
        page.locator("dialog.modal").get_by_role("button", name="Publish").click()
        page.locator(".ok-box", has_text="Published: ui-editor-refused v1").wait_for()


def deploying_v2(http: httpx.Client, name: str, versions: int) -> str:
    """Publish `versions` versions of `name` with `http` (an admin's) and start a deployment
    of v2 that holds its one stage (100 %) for an hour; the deployment's id."""
    call = {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/never"}}
    for version in range(1, versions + 1):
        document = {"name": name, "description": f"v{version}", "vertices": {"call": call}}
        assert http.post("/workflows", json=document).status_code in (200, 201)
    hold = {"weight": 100, "minRuns": 1000, "minDurationSeconds": 3600}
    deployment = {"version": 2, "stages": [hold], "rollback": {"minFinishedRuns": 1000}}
    started = http.post(f"/workflows/{name}/deployments", json=deployment)
    assert started.status_code == 201, started.text
    return str(started.json()["id"])


def test_a_tenant_key_reads_its_runs_deployment_as_text(
    secured: tuple[str, str], browser: Any
) -> None:
    """A run a deployment routed to its candidate names the deployment on its page: a link
    for an admin key, its id as text for a tenant key, which the deployment's page would
    refuse (403)."""
    url, admin_key = secured
    name = "ui-tenant-candidate"
    auth = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=url, headers=auth, trust_env=False, timeout=30) as http:
        deployment_id = deploying_v2(http, name, versions=2)
        as_tenant = {"Authorization": f"Bearer {TENANT_KEY['acme']}"}
        submitted = http.post(f"/workflows/{name}/runs", json={"input": {}}, headers=as_tenant)
        run = submitted.json()["run"]
        assert run["version"] == 2, run
        for key in (TENANT_KEY["acme"], admin_key):
            with opened(browser, f"{url}/ui/#/runs/{run['id']}") as (page, watch):
                watch.allowed_errors.append("status of 401")
                give_key(page, key)
                named = page.locator(".candidate-deployment")
                named.wait_for()
                assert named.inner_text() == f"deployment {deployment_id[:8]}"
                links = page.locator('main a[href^="#/deployments"]')
                if key == admin_key:
                    assert named.get_attribute("href") == f"#/deployments/{deployment_id}"
                else:
                    assert links.count() == 0, "a tenant key is offered no deployment's page"
                    assert named.get_attribute("title") == f"deployment {deployment_id}"
                    shoot(page, "candidate-run-tenant-key")
        http.post(f"/deployments/{deployment_id}/abort", json={})


def test_a_tenant_key_is_offered_no_deployment_on_the_workflow_page(
    secured: tuple[str, str], browser: Any
) -> None:
    """While a deployment runs, its candidate's page and another version's link it ("Follow
    the deployment", "Open it") and each version has a Deploy button, for an admin key; a
    tenant key reads where each version stands with neither (the deployment's page and the
    deployments route answer it 403), and the page asks it nothing an admin's (no 403)."""
    url, admin_key = secured
    name = "ui-tenant-deploy"
    auth = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=url, headers=auth, trust_env=False, timeout=30) as http:
        deployment_id = deploying_v2(http, name, versions=3)
        href = f"#/deployments/{deployment_id}"
        for key in (TENANT_KEY["acme"], admin_key):
            tenant = key != admin_key
            for version, link in ((2, "Follow the deployment"), (3, "Open it")):
                with opened(browser, f"{url}/ui/#/workflows/{name}?v={version}") as (page, watch):
                    watch.allowed_errors.append("status of 401")
                    give_key(page, key)
                    state = page.locator(".deploy-state-line")
                    state.wait_for()
                    deploy = page.get_by_role("button", name=f"Deploy v{version}…")
                    if tenant:
                        assert page.locator('main a[href^="#/deployments"]').count() == 0
                        assert deploy.count() == 0, "a tenant key is offered no Deploy"
                        assert "running" in state.inner_text() or "deployed" in state.inner_text()
                        shoot(page, f"workflow-deployment-tenant-key-v{version}")
                    else:
                        assert state.get_by_role("link", name=link).get_attribute("href") == href
                        assert deploy.is_disabled()  # one deployment at a time
                        shoot(page, f"workflow-deployment-admin-key-v{version}")
        http.post(f"/deployments/{deployment_id}/abort", json={})


def test_a_tenant_key_reads_an_open_breaker_without_the_link_to_its_reset(
    secured: tuple[str, str], browser: Any
) -> None:
    """Retry's dialog says the open breaker the retried step calls, with a link to its Reset
    on the Destinations page for an admin key; that page answers a tenant key 403, so a
    tenant key reads the same warning without the link."""
    url, admin_key = secured
    name, destination = "ui-tenant-breaker", "ui-tenant-breaker-dest"
    config = {
        "url": "http://127.0.0.1:9/never",  # refused: 5 failures open the tenant breaker
        "destination": destination,
        "retry": {"maxAttempts": 5, "baseDelayMs": 10},
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": config}
    document = {"name": name, "vertices": {"call": vertex}}
    auth = {"Authorization": f"Bearer {admin_key}"}
    as_tenant = {"Authorization": f"Bearer {TENANT_KEY['acme']}"}
    with httpx.Client(base_url=url, headers=auth, trust_env=False, timeout=30) as http:
        assert http.post("/workflows", json=document).status_code in (200, 201)
        submitted = http.post(f"/workflows/{name}/runs", json={"input": {}}, headers=as_tenant)
        run_id = submitted.json()["run"]["id"]
        eventually(lambda: http.get(f"/runs/{run_id}").json()["status"] == "FAILED", 60, "FAILED")
        preview = http.get(f"/runs/{run_id}/retry/preview", headers=as_tenant).json()
        assert preview["breakers"], preview
        for key in (TENANT_KEY["acme"], admin_key):
            with opened(browser, f"{url}/ui/#/runs/{run_id}") as (page, watch):
                watch.allowed_errors.append("status of 401")
                give_key(page, key)
                page.get_by_role("button", name="Retry", exact=True).click()
                previewed = page.locator("dialog.modal .warning-box")
                previewed.locator("li", has_text="is open").wait_for()
                links = previewed.locator("a.reset-link")
                if key == admin_key:
                    assert links.count() == 1
                    assert links.get_attribute("href") == (
                        f"#/destinations?destination={destination}&tenant=acme"
                    )
                else:
                    assert links.count() == 0, "a tenant key is offered no Reset"
                    shown = 'main a[href^="#/destinations"], dialog a[href^="#/destinations"]'
                    assert page.locator(shown).count() == 0
                    shoot(page, "retry-dialog-breaker-tenant-key")
                page.locator("dialog.modal").get_by_role("button", name="Cancel").click()
