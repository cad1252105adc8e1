"""Everything a user can get wrong ends in one line with the fix and its exit code, never a
traceback (`--debug` shows it): each case runs the real `schemabridge` binary."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from engine.store import db
from tests.e2e.test_cli_run import run_cli


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sb(*args: str, database: str, redis: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"SCHEMABRIDGE_DATABASE_URL": database}
    if redis is not None:
        env["SCHEMABRIDGE_REDIS_URL"] = redis
    return run_cli(args, env)


def one_line(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """The command exited `code` with exactly one line on stderr, holding `fragments`."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    """A valid workflow that needs no input (its one call is never reached in these tests)."""
    path = tmp_path / "lookup.json"
    path.write_text(
        json.dumps(
            {
                "name": "lookup",
                "vertices": {"get": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/"}}},
            }
        )
    )
    return path


@pytest.fixture
def sqlite(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"


def test_a_demo_port_already_taken(workflow: Path, sqlite: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = sb("run", str(workflow), "--demo-downstream", "--demo-port", port, database=sqlite)
    one_line(result, 2, f"127.0.0.1:{port}", "--demo-port")


def test_an_unreachable_database(workflow: Path) -> None:
    url = f"postgresql+asyncpg://postgres:secret@127.0.0.1:{free_port()}/sb"
    line = one_line(sb("run", str(workflow), database=url), 4, "cannot use the database")
    assert "secret" not in line and "postgres:***@" in line


def test_a_database_that_does_not_exist(workflow: Path, pg_database_url: str) -> None:
    url = pg_database_url.rsplit("/", 1)[0] + "/schemabridge_no_such_database"
    one_line(sb("run", str(workflow), database=url), 2, "does not exist", "createdb")


def test_a_url_parameter_asyncpg_does_not_take(workflow: Path) -> None:
    url = "postgresql://postgres:secret@127.0.0.1:5432/sb?connect_timeout=5&keepalives=1"
    line = one_line(sb("run", str(workflow), database=url), 2, "'keepalives'", "connect_timeout")
    assert "secret" not in line and "internal error" not in line


def test_verify_full_without_a_root_certificate(workflow: Path, tmp_path: Path) -> None:
    url = "postgresql://postgres:secret@127.0.0.1:5432/sb?sslmode=verify-full"
    env = {"SCHEMABRIDGE_DATABASE_URL": url, "HOME": str(tmp_path)}
    line = one_line(run_cli(("run", str(workflow)), env), 2, f"{tmp_path}/.postgresql/root.crt")
    assert "sslmode=require" in line and "createdb" not in line and "secret" not in line


@pytest.mark.parametrize(
    "url",
    ["mysql+aiomysql://u@127.0.0.1/db", "postgresql+psycopg2://postgres@127.0.0.1/db", "nonsense"],
)
def test_a_database_url_schemabridge_cannot_use(workflow: Path, url: str) -> None:
    one_line(sb("run", str(workflow), database=url), 2, "sqlite:///", "postgresql://")


def test_an_sqlite_path_that_cannot_be_written(workflow: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    url = f"sqlite+aiosqlite:///{a_file}/sb.db"
    # Each command names where its URL came from: an option only the command has.
    for command in (["run", str(workflow)], ["keys", "list"]):
        line = one_line(sb(*command, database=url), 2, "cannot open the SQLite database")
        assert "SCHEMABRIDGE_DATABASE_URL" in line and "--database" not in line
    given = run_cli(["run", str(workflow), "--database", url], {})
    line = one_line(given, 2, "cannot open the SQLite database", "writable path in --database")
    assert "SCHEMABRIDGE_DATABASE_URL" not in line


def test_redis_down(workflow: Path, sqlite: str) -> None:
    redis = f"redis://:pw@127.0.0.1:{free_port()}/0"
    line = one_line(sb("run", str(workflow), database=sqlite, redis=redis), 4, "Redis")
    assert "SCHEMABRIDGE_REDIS_URL" in line and ":pw@" not in line


@pytest.mark.parametrize(
    "url", ["", "localhost:6379", "http://127.0.0.1:6379/0", "redis://:pw@127.0.0.1:6379/x"]
)
@pytest.mark.parametrize("command", [["run"], ["worker"]])
def test_a_redis_url_schemabridge_cannot_use(
    workflow: Path, sqlite: str, url: str, command: list[str]
) -> None:
    """Empty, without a scheme, the wrong scheme, a database that is not a number: one line
    naming the forms that work and how to use the embedded Redis, before anything starts
    (exit 2, a setting that cannot work, from `run` and a service alike)."""
    args = [*command, str(workflow)] if command == ["run"] else command
    line = one_line(
        sb(*args, database=sqlite, redis=url), 2, "redis://", "unset SCHEMABRIDGE_REDIS_URL"
    )
    assert "internal error" not in line and ":pw@" not in line


def test_an_unknown_workflow_lists_the_names(workflow: Path, sqlite: str) -> None:
    result = sb("run", str(workflow), "--workflow", "nope", database=sqlite)
    line = one_line(result, 2, "no workflow named 'nope'", "lookup")
    assert "did you mean" not in line  # nothing is close to "nope"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("@/nonexistent/input.json", "cannot read --input file"), ("{nope", "not valid JSON")],
)
def test_a_bad_input(workflow: Path, sqlite: str, value: str, fragment: str) -> None:
    one_line(sb("run", str(workflow), "--input", value, database=sqlite), 2, fragment)


def test_a_missing_workflow_file(tmp_path: Path, sqlite: str) -> None:
    one_line(sb("run", str(tmp_path / "none.json"), database=sqlite), 2, "cannot read")


def test_run_typed_for_runs_names_the_runs_command(tmp_path: Path, sqlite: str) -> None:
    # `run FILE` takes a workflow file: `run list` is `runs list` with the `s` missed.
    said = "error: there is no workflow file `list`; did you mean `schemabridge runs list`?"
    assert one_line(sb("run", "list", database=sqlite), 2) == said
    show = one_line(sb("run", "show", "abc123", database=sqlite), 2)
    assert show.endswith("did you mean `schemabridge runs show abc123`?"), show
    # Another name that is no file keeps the plain message, and nothing was created.
    plain = one_line(sb("run", "lists", database=sqlite), 2)
    assert plain == "error: cannot read lists: No such file or directory"
    assert not (tmp_path / "sb.db").exists()


@pytest.mark.parametrize(
    "command",
    [["serve", "--port", "0"], ["api", "--port", "0"], ["worker"]],
    ids=["serve", "api", "worker"],
)
def test_services_refuse_to_start_in_one_line(
    command: list[str], request: pytest.FixtureRequest
) -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    # A separate process on PostgreSQL needs the shared Redis before anything else
    # (test_service_redis.py); given one, the database that does not answer is what it says.
    redis = None if command[0] == "serve" else request.getfixturevalue("redis_url")
    # The exit codes of every command: 4 a database that does not answer, 2 a setting that
    # cannot work (as `db upgrade` and `keys` below).
    one_line(sb(*command, database=url, redis=redis), 4, "cannot use the database")
    one_line(sb(*command, database="mysql+aiomysql://u@h/db"), 2, "unsupported database scheme")


@pytest.mark.parametrize(
    "command",
    [["serve", "--port"], ["api", "--port"], ["worker", "--health-port"]],
    ids=["serve", "api", "worker"],
)
def test_services_refuse_a_misspelt_setting_naming_the_one_meant(
    command: list[str], sqlite: str
) -> None:
    # Ignored, the worker used the default SQLite file beside the shared Redis, and was
    # healthy; the suite's own SCHEMABRIDGE_TEST_* passes. The port is taken, so a service
    # that did not check its settings first ends at once too (exit 1), not at a timeout.
    env = {"SCHEMABRIDGE_DATABSE_URL": sqlite, "SCHEMABRIDGE_TEST_REDIS": "redis://x/0"}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        line = one_line(run_cli((*command, port), env), 2)
    assert line == (
        "error: unknown setting SCHEMABRIDGE_DATABSE_URL: did you mean SCHEMABRIDGE_DATABASE_URL?"
    )


def test_db_upgrade_keys_and_validate(tmp_path: Path, sqlite: str) -> None:
    one_line(sb("db", "upgrade", database="nonsense"), 2, "is not a URL")
    unreachable = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    one_line(sb("db", "upgrade", database=unreachable), 4, "cannot use the database")
    # A revision this release does not ship (a typo, a newer release's) was "internal error:
    # CommandError: Can't locate revision identified by '0999'", exit 1.
    shipped = f"this release's are 0001 to {db.head_revision()}"
    for typo in ("0999", "16"):
        one_line(sb("db", "upgrade", typo, database=sqlite), 2, f"no revision '{typo}'", shipped)
    # An older revision (a rollback's) said "is at 0022 already: nothing to do", which read
    # as done: the database stays past it, and the release that needs it refuses it.
    assert sb("db", "upgrade", database=sqlite).returncode == 0
    head = db.head_revision()
    past = one_line(sb("db", "upgrade", "0015", database=sqlite), 0, f"is at {head}, past 0015")
    assert "never goes back" in past and "up to 0015 cannot use this database" in past, past
    said = one_line(sb("db", "upgrade", head, database=sqlite), 0)
    assert said.endswith(f"is at {head} already: nothing to do"), said
    # The command a rollback reaches for was answered "Did you mean 'upgrade'?".
    for asked in (("db", "downgrade"), ("db", "downgrade", "0015")):
        down = one_line(sb(*asked, database=sqlite), 2, "no downgrade is offered")
        assert "restore the backup taken before `db upgrade`" in down, down
    one_line(sb("keys", "list", database=unreachable), 4, "cannot use the database")
    unreadable = sb("validate", str(tmp_path / "none.json"), database=sqlite)
    assert unreadable.returncode == 2 and "Cannot read: no such file" in unreadable.stdout
    assert "Traceback" not in unreadable.stdout + unreadable.stderr


def test_an_error_quoting_brackets_is_said_as_text(tmp_path: Path, sqlite: str) -> None:
    """An error line quoting what was typed was read as Rich markup: `keys revoke '[/x]'`
    ended in a MarkupError traceback instead of saying there is no such key."""
    assert sb("db", "upgrade", database=sqlite).returncode == 0
    one_line(sb("keys", "revoke", "[/x]", database=sqlite), 1, "no API key with id '[/x]'")
    one_line(sb("secrets", "delete", "[/x]", "--tenant", "a", database=sqlite), 2, "'[/x]'")


def test_debug_shows_the_traceback(workflow: Path) -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    result = sb("--debug", "run", str(workflow), database=url)
    assert result.returncode == 4
    assert "Traceback" in result.stderr
    assert "cannot use the database" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (("--debug", "serve", "--database", "mysql://x/y"), "unsupported database scheme"),
        (("--debug", "keys", "list"), "cannot open the SQLite database"),
        (("--debug", "runs", "list"), "cannot reach the SchemaBridge API"),
        (("runs", "list", "--debug"), "cannot reach the SchemaBridge API"),
        (("--debug", "runs", "show", "0123456789"), "cannot reach the SchemaBridge API"),
    ],
)
def test_debug_shows_the_traceback_whatever_the_command(
    tmp_path: Path, command: tuple[str, ...], fragment: str
) -> None:
    """The global `--debug` (the one `schemabridge --help` offers) reaches every command, not
    only `run`; a command's own `--debug` does the same."""
    env = {
        "SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'none.db'}",
        "SCHEMABRIDGE_API_URL": f"http://127.0.0.1:{free_port()}",
    }
    result = run_cli(command, env)
    assert result.returncode in (2, 4), result.stderr
    assert "Traceback" in result.stderr
    assert fragment in result.stderr.splitlines()[-1]
    without = run_cli(tuple(arg for arg in command if arg != "--debug"), env)
    one_line(without, result.returncode, fragment)


def test_run_takes_its_own_debug_too(workflow: Path) -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    result = sb("run", str(workflow), "--debug", database=url)
    assert result.returncode == 4, result.stderr
    assert "Traceback" in result.stderr
    assert "cannot use the database" in result.stderr.splitlines()[-1]


def test_run_help_names_types_in_words(sqlite: str) -> None:
    shown = sb("run", "--help", database=sqlite).stdout
    assert "embedded store" not in shown
    assert "<bool>" not in shown and "<str>" not in shown and "<float>" not in shown
    assert "--tenant-rate N" in shown and "--output text|json" in shown
    assert "for scripts). [default: text]" in " ".join(shown.split())
    assert "PostgreSQL" in shown
    # `summary`, the output's name before `text`, is still taken (the file is what fails).
    former = sb("run", "missing.json", "-o", "summary", database=sqlite)
    assert former.returncode == 2 and "missing.json" in former.stderr, former.stderr
    assert "--output" not in former.stderr, former.stderr


def test_messages_do_not_wrap_when_piped(workflow: Path) -> None:
    url = f"postgresql+asyncpg://postgres:secret@127.0.0.1:{free_port()}/a-rather-long-name"
    line = one_line(sb("run", str(workflow), database=url), 4)
    assert len(line) > 120  # one line however long, not folded at 80 columns


def test_a_workflow_typo_names_the_workflow_meant(workflow: Path, sqlite: str) -> None:
    result = sb("run", str(workflow), "--workflow", "lokup", database=sqlite)
    one_line(result, 2, "no workflow named 'lokup' in the files given; did you mean 'lookup'?")


def test_client_options_before_the_command_say_where_they_go(sqlite: str) -> None:
    result = sb("--api-url", "http://127.0.0.1:9", "runs", "list", database=sqlite)
    one_line(result, 2, "No such option: --api-url", "it goes after the command")
    one_line(sb("--api-key", "k", "runs", "list", database=sqlite), 2, "SCHEMABRIDGE_API_KEY")


def test_output_format_where_output_is_the_steps_says_format(sqlite: str) -> None:
    resolve = sb("runs", "resolve", "abc", "get", "-o", "json", database=sqlite)
    said = "No such option: -o; did you mean `--format`? (here --output is the step's output)"
    one_line(resolve, 2, said)
    assert "did you mean" not in one_line(sb("runs", "list", "-x", database=sqlite), 2, "-x")


@pytest.mark.parametrize("value", ["0", "-3", "4097"])
def test_a_worker_concurrency_out_of_range(sqlite: str, value: str) -> None:
    # At 0 a worker used to start and never claim a step; past 4,096 its lease renewals
    # would no longer fit one statement.
    for command in (("worker", f"--concurrency={value}"), ("serve", f"--concurrency={value}")):
        result = sb(*command, database=sqlite)
        one_line(result, 2, f"--concurrency {value}", "from 1 to 4096", "more worker processes")
    result = run_cli(
        ("worker",),
        {"SCHEMABRIDGE_DATABASE_URL": sqlite, "SCHEMABRIDGE_WORKER_CONCURRENCY": value},
    )
    one_line(result, 2, "SCHEMABRIDGE_WORKER_CONCURRENCY")


def test_a_command_of_a_group_typed_without_it(sqlite: str) -> None:
    # `schemabridge logs RUN` is `runs logs`: the fix names the group (or the groups).
    one_line(sb("logs", "abc", database=sqlite), 2, "Did you mean `schemabridge runs logs`?")
    one_line(
        sb("show", "abc", database=sqlite),
        2,
        "Did you mean `schemabridge GROUP show`, GROUP one of deployments, destinations, runs, ",
    )
    # Click's own suggestion stays when it has one, and nothing is made up otherwise.
    click = one_line(sb("rusn", database=sqlite), 2, "Did you mean 'run', 'runs'?")
    assert "GROUP" not in click
    assert "Did you mean" not in one_line(sb("frobnicate", database=sqlite), 2, "No such command")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("serve", "--log-level", "loud"),
            "--log-level 'loud': give debug, info, warning or error",
        ),
        (("runs", "list", "-o", "yaml"), "--output 'yaml': give text or json"),
        (("runs", "list", "--limit", "ten"), "--limit 'ten': give a whole number"),
        (("worker", "--concurrency=x"), "--concurrency 'x': give a whole number"),
    ],
)
def test_a_value_of_the_wrong_kind_is_said_in_our_words(
    sqlite: str, args: tuple[str, ...], line: str
) -> None:
    # Not typer's "Invalid value for '--log-level': Value error, 'loud' is not one of …".
    said = one_line(sb(*args, database=sqlite), 2, line)
    assert "Value error" not in said and "Input should be" not in said
