"""The processes as an operator runs them (real subprocesses): `schemabridge api` refuses a
database whose schema is not at head (exit 1, one line, no traceback) and serves an upgraded
one; `serve --demo` and `serve` print their URL and answer; `worker --health-port` serves
/health beside its marker; all stop gracefully on SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from engine.store import db
from tests import cli_forks
from tests.conftest import Backend
from tests.e2e.outage_harness import throwaway_redis, wait_until
from tests.e2e.rest_harness import ROOT, SCHEMABRIDGE, process_env, service
from tests.integration.operations_harness import single
from vertices.egress import ALLOW_ENV

# Never migrated: these tests start from databases no migration has touched.
pytestmark = pytest.mark.blank_database

HEAD = db.head_revision()


def sb(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli_forks.run([SCHEMABRIDGE, *args], env=env, cwd=None, timeout=timeout)


def get(url: str, **kwargs: str) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=30) as http:
        return http.get(url, headers=kwargs)


def _assert_one_line_refusal(
    result: subprocess.CompletedProcess[str], code: int, *needles: str
) -> str:
    """One line, exit `code`: 2 a database it cannot use as it is, 4 one that does not
    answer, 1 a port someone else holds."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_api_refuses_a_database_never_migrated(backend: Backend, tmp_path: Path) -> None:
    # An empty SQLite file: a missing one is refused before (test_cli_missing_database.py).
    sqlite_file = db.sqlite_file(db.normalise_url(backend.database_url))
    if sqlite_file is not None:
        sqlite_file.touch()
    result = sb("api", "--port", "0", env=process_env(backend, tmp_path))
    line = _assert_one_line_refusal(result, 2, "schemabridge db upgrade", HEAD)
    assert "never migrated" in line


def test_api_refuses_a_database_behind_head(backend: Backend, tmp_path: Path) -> None:
    env = process_env(backend, tmp_path)
    assert sb("db", "upgrade", "0008", env=env).returncode == 0
    result = sb("api", "--port", "0", env=env)
    _assert_one_line_refusal(result, 2, "0008", HEAD, "schemabridge db upgrade")


def test_api_refuses_a_database_a_newer_release_migrated(tmp_path: Path) -> None:
    database = tmp_path / "sb.db"
    env = process_env(Backend("embedded", f"sqlite+aiosqlite:///{database}", None), tmp_path)
    assert sb("db", "upgrade", env=env).returncode == 0
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    result = sb("api", "--port", "0", env=env)
    _assert_one_line_refusal(result, 2, "9999", "newer release")


def test_api_refuses_an_unreachable_database(tmp_path: Path, redis_url: str) -> None:
    # With the shared Redis an api on PostgreSQL needs (test_service_redis.py).
    backend = Backend("down", "postgresql+asyncpg://postgres@127.0.0.1:1/none", redis_url)
    result = sb("api", "--port", "0", env=process_env(backend, tmp_path))
    _assert_one_line_refusal(result, 4, "cannot use the database", "127.0.0.1:1")


def test_api_refuses_a_role_the_server_does_not_have_as_a_setting(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A second new user's tour: a role that does not exist read "does not answer" (exit 4),
    the exit of a server to wait for, though the server had answered. It is a setting to fix:
    exit 2, saying so."""
    url = make_url(pg_database_url).set(username="sb_no_such_role")
    backend = Backend("server", url.render_as_string(hide_password=False), redis_url)
    result = sb("api", "--port", "0", env=process_env(backend, tmp_path))
    _assert_one_line_refusal(
        result, 2, "sb_no_such_role", "the server refused the login", "SCHEMABRIDGE_DATABASE_URL"
    )


def test_api_refuses_an_address_in_use(tmp_path: Path) -> None:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = sb("api", "--port", str(port), env=process_env(backend, tmp_path))
    _assert_one_line_refusal(
        result, 1, f"cannot listen on 127.0.0.1:{port}", "--port (0: a free one)"
    )


def test_api_serves_an_upgraded_database_and_stops_on_sigterm(
    backend: Backend, tmp_path: Path
) -> None:
    env = process_env(backend, tmp_path)
    assert sb("db", "upgrade", env=env).returncode == 0
    created = sb("keys", "create", "--admin", env=env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    args = ["api", "--port", "0", "--log-format", "json"]
    with service(args, env, tmp_path / "api.log") as api:
        url = api.wait_for_url()
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        assert get(f"{url}/health").json() == {"status": "ok"}
        assert get(f"{url}/keys").status_code == 401
        assert get(f"{url}/keys", Authorization=f"Bearer {key}").status_code == 200
        # It beats like every service: on the Services page, and a marker for a probe.
        name = f"api-{socket.gethostname()}-{url.rsplit(':', 1)[1]}"
        services = get(f"{url}/services", Authorization=f"Bearer {key}").json()["items"]
        assert [s["up"] for s in services if s["name"] == name] == [True], services
        assert (tmp_path / "health" / name).exists()
        assert api.stop(signal.SIGTERM) == 0
    assert not (tmp_path / "health" / name).exists(), "the marker is gone after the stop"
    log = api.stderr()
    assert "Traceback" not in log
    # The access log: one JSON object a line.
    assert '"route": "/keys", "path": "/keys", "status": 401' in log
    # Its ready line and its log name it as its heartbeat and marker do: two api processes
    # are told apart in shipped logs.
    assert api.stdout().startswith(f"{name} ready: pid "), api.stdout()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    named = [record for record in records if "service" in record]  # not the access log's
    events = [record["event"] for record in named]
    assert "service.ready" in events, named
    # Its stop too, as a worker's (a second new user's tour found none).
    assert events[-1] == "service.stopped", named
    assert {record["service"] for record in named} == {name}, named


def test_serve_demo_prints_its_url_with_auth_off(tmp_path: Path) -> None:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(backend, tmp_path)
    env.pop(ALLOW_ENV)  # --demo allows loopback itself (the demo downstream is there)
    with service(["serve", "--demo", "--port", "0"], env, tmp_path / "serve.log") as serve:
        url = serve.wait_for_url()
        assert get(f"{url}/health").json() == {"status": "ok"}
        assert get(f"{url}/keys").status_code == 200, "authentication is off"
        run_input = json.loads((ROOT / "examples/support-ticket.input.json").read_text())
        answer = httpx.post(
            f"{url}/workflows/support-ticket/runs?wait=true", json={"input": run_input}, timeout=60
        )
        assert answer.status_code == 200, answer.text  # its calls reached the demo downstream
        assert (tmp_path / "health").is_dir() and any((tmp_path / "health").iterdir())
        assert serve.stop(signal.SIGTERM) == 0
    log = serve.stderr()
    assert "DEMO MODE" in log and "Authentication is OFF" in log
    # Piped, no line is wider than what it says (a rule spans a terminal, not a log).
    assert max(len(line) for line in log.splitlines()) < 400, log
    assert "Egress to loopback is ALLOWED" in log
    assert "support-ticket" in log, "the examples were published"
    # The monitor's address, where someone paged at night looks first (not only the API's).
    assert f"web monitor: {url}/ui\n" in log, log
    assert not any((tmp_path / "health").iterdir()), "the marker is gone after the stop"


def _demo_downstream(serve: Any) -> str:
    return next(
        line.rsplit(" ", 1)[1]
        for line in serve.stdout().splitlines()
        if line.startswith("demo downstream at ")
    )


def _serve_demo_once(env: dict[str, str], log: Path) -> tuple[str, int, str]:
    """Start `serve --demo` on `env`'s database, read its downstream URL and support-ticket's
    latest version, stop it."""
    with service(["serve", "--demo", "--port", "0"], env, log) as serve:
        url = serve.wait_for_url()
        downstream = _demo_downstream(serve)
        version = get(f"{url}/workflows/support-ticket").json()["version"]
        assert serve.stop(signal.SIGTERM) == 0
    return downstream, version, serve.stderr()


def test_serve_demo_again_keeps_its_downstream_address(tmp_path: Path) -> None:
    """A second `serve --demo` on the same database starts the demo downstream where the
    published examples call it (the versions a user derived from them, in the README's
    deployment recipe, keep working), and publishes no new example versions. When that port
    is taken it takes another and says what that means."""
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(backend, tmp_path)
    env.pop(ALLOW_ENV)
    first, version, _ = _serve_demo_once(env, tmp_path / "serve-1.log")
    again, version_again, _ = _serve_demo_once(env, tmp_path / "serve-2.log")
    assert (again, version_again) == (first, version)
    port = int(first.rsplit(":", 1)[1])
    with socket.create_server(("127.0.0.1", port)):
        moved, version_moved, log = _serve_demo_once(env, tmp_path / "serve-3.log")
    assert moved != first and version_moved == version + 1
    assert f"port {port}" in log and "taken" in log, log


def test_serve_without_demo_needs_keys(tmp_path: Path) -> None:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(backend, tmp_path)
    with service(["serve", "--port", "0"], env, tmp_path / "serve.log") as serve:
        url = serve.wait_for_url()
        assert get(f"{url}/keys").status_code == 401
        assert serve.stop(signal.SIGINT) == 0
    assert "DEMO MODE" not in serve.stderr()


@pytest.mark.parametrize("name", ["worker 5", "../evil"])
def test_a_worker_name_no_marker_can_have_is_refused_before_ready(
    tmp_path: Path, name: str
) -> None:
    """A second new user's tour: `worker --name "worker 5"` printed its ready line, then
    failed with "internal error: ExceptionGroup" (the name only reached the health marker
    once the worker was ready; the reason only with --debug). A script waiting for the ready
    line went on. It is refused first: one line, exit 2, no ready line."""
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    worker = sb("worker", "--name", name, env=process_env(backend, tmp_path))
    _assert_one_line_refusal(worker, 2, f"--name: service name {name!r}", "use letters, digits")
    assert not (tmp_path / "sb.db").exists(), "refused before it opened anything"


def test_worker_serves_health_beside_its_marker(backend: Backend, tmp_path: Path) -> None:
    env = process_env(backend, tmp_path)
    # As an operator does: on PostgreSQL a worker never migrates (an SQLite file it would).
    assert sb("db", "upgrade", env=env).returncode == 0
    args = ["worker", "--name", "w1", "--health-port", "0", "--log-level", "warning"]
    with service(args, env, tmp_path / "worker.log") as worker:
        url = worker.wait_for_url()
        assert get(f"{url}/health").json() == {"status": "ok"}
        assert get(f"{url}/keys").status_code == 404, "the health port serves /health alone"
        assert (tmp_path / "health" / "w1").is_file()
        assert worker.stop(signal.SIGTERM) == 0
    assert not (tmp_path / "health" / "w1").exists()
    assert "Traceback" not in worker.stderr()


def test_a_worker_on_postgresql_refuses_a_database_behind_as_the_api_does(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A worker of a new release, started before `db upgrade` (a rolling upgrade), must not
    migrate the database the other processes share under them: it refuses, with the api's
    line and exit code, and the schema stays where it was."""
    env = process_env(Backend("server", pg_database_url, redis_url), tmp_path)
    assert sb("db", "upgrade", "0017", env=env).returncode == 0
    worker = sb("worker", "--name", "w1", env=env)
    line = _assert_one_line_refusal(worker, 2, "0017", HEAD, "schemabridge db upgrade")
    assert line == _assert_one_line_refusal(sb("api", "--port", "0", env=env), 2)
    upgraded = sb("db", "upgrade", env=env)
    assert f"from 0017 to {HEAD}" in upgraded.stderr, "the worker left the schema at 0017"


def test_a_process_that_migrates_says_from_which_revision_to_which(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """`serve` migrates, on PostgreSQL too (one process, the laptop's command): one log line
    says it, with both revisions. A worker on an SQLite file migrates it and says the same."""
    env = process_env(Backend("server", pg_database_url, redis_url), tmp_path)
    assert sb("db", "upgrade", "0017", env=env).returncode == 0
    with service(["serve", "--port", "0"], env, tmp_path / "serve.log") as serve:
        serve.wait_for_url()
        assert serve.stop(signal.SIGTERM) == 0
    said = f"migrated the database schema from 0017 to {HEAD}"
    assert serve.stderr().count(said) == 1, serve.stderr()
    embedded = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(embedded, tmp_path)
    assert sb("db", "upgrade", "0017", env=env).returncode == 0
    args = ["worker", "--name", "w1", "--health-port", "0"]
    with service(args, env, tmp_path / "worker.log") as worker:
        worker.wait_for_url()
        assert worker.stop(signal.SIGTERM) == 0
    assert worker.stderr().count(said) == 1, worker.stderr()


def test_an_api_stopping_ends_its_event_streams_at_once(tmp_path: Path) -> None:
    """SIGTERM with a client on a run's event stream (`runs watch`, the monitor): the stream
    ends at once with a `stopping` event telling the client to reconnect, and the api exits
    well within its 20 s grace, with nothing logged as an error. It held the whole grace, then
    cancelled the stream with two ERROR records and a traceback."""
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(backend, tmp_path, auth="off")
    assert sb("db", "upgrade", env=env).returncode == 0
    with service(["api", "--port", "0"], env, tmp_path / "api.log") as api:
        url = api.wait_for_url()
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
            # No worker runs here: the run stays unended, so only the stop ends its stream.
            published = http.post("/workflows", json=single("idle", "http://127.0.0.1:9/x"))
            assert published.status_code in (200, 201), published.text
            run = http.post("/workflows/idle/runs", json={"input": {}})
            assert run.status_code == 201, run.text
            with http.stream("GET", f"/runs/{run.json()['id']}/events") as events:
                lines = events.iter_lines()
                assert next(line for line in lines if line.startswith("event:")).endswith(
                    "progress"
                )
                api.process.send_signal(signal.SIGTERM)
                # A bound on the exit, far under the grace: not a measure of speed.
                assert api.process.wait(timeout=10) == 0
                rest = list(lines)
    # No `end`: the client reconnects, and can tell a restart from a broken connection.
    assert [line for line in rest if line.startswith("event:")] == ["event: stopping"], rest
    told = rest[rest.index("event: stopping") + 1]
    assert told == 'data: {"message":"the server is stopping; reconnect"}', rest
    log = api.stderr()
    assert "Traceback" not in log and "ERROR" not in log, log


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_redis_outage_is_one_warning_line_of_an_api(tmp_path: Path) -> None:
    """The README's promise, for an api process: its Redis stopped and started again, every
    part that uses Redis meets the outage (the heartbeat, beating every second here, the
    cancellation listener, the destinations' history sampler; an api, which never waits for
    wake-ups, has no wake-up listener), and the log has one warning for it, then says when
    each part works again (info)."""
    port = _free_port()
    backend = Backend(
        "throwaway", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", f"redis://127.0.0.1:{port}/0"
    )
    env = process_env(backend, tmp_path, heartbeat_interval_s="1")
    assert sb("db", "upgrade", env=env).returncode == 0
    with (
        throwaway_redis(port, tmp_path) as redis_server,
        service(["api", "--port", "0", "--access-log", "off"], env, tmp_path / "api.log") as api,
    ):
        url = api.wait_for_url()
        redis_server.kill()
        redis_server.wait(timeout=30)
        down_since: list[float] = []

        def seen_down_for_a_while() -> bool:
            """/health has answered 503 for 3 s and more, without a break."""
            if get(f"{url}/health").status_code != 503:
                down_since.clear()
            elif not down_since:
                down_since.append(time.monotonic())
            return bool(down_since) and time.monotonic() - down_since[0] >= 3

        wait_until(seen_down_for_a_while, "the outage to last 3 s", timeout_s=60)
        with throwaway_redis(port, tmp_path):
            wait_until(
                lambda: "heartbeat" in api.stderr() and "works again" in api.stderr(),
                "the heartbeat to work again",
                timeout_s=60,
            )
            wait_until(
                lambda: "listening again" in api.stderr(),
                "the cancellation listener to subscribe again",
                timeout_s=60,
            )
            assert api.stop(signal.SIGTERM) == 0
    log = api.stderr()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, "\n".join(warnings)
    assert "redis unreachable" in warnings[0] and "further failures" in warnings[0]
    assert "wake-up listener" not in log, "an api only publishes wake-ups"
    assert "Traceback" not in log
