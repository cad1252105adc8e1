"""Everything an operator can get wrong with the remote commands, as real subprocesses against
`schemabridge serve`: each is one `error:` line with the fix (a 422 adds its problems), the
documented exit code, nothing on stdout and no traceback (unless `--debug`)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli_harness import SCHEMABRIDGE, Stack, assert_refused


@pytest.fixture(scope="module")
def workflow(serve_api: Stack) -> str:
    """A one-step workflow calling the demo downstream, published for this module."""
    path = serve_api.tmp / "lookup.json"
    path.write_text(
        json.dumps(
            {
                "name": "cli-errors-lookup",
                "inputSchema": {
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "string"}},
                },
                "vertices": {
                    "get": {
                        "type": "GATEWAY",
                        "config": {"url": serve_api.downstream + "/customers/{{ input.id }}"},
                    }
                },
            }
        )
    )
    serve_api.ok("workflows", "publish", str(path))
    return "cli-errors-lookup"


@pytest.fixture(scope="module")
def failed(serve_api: Stack, workflow: str) -> str:
    """A FAILED run (the downstream answers 404)."""
    result = serve_api.cli(
        "runs", "submit", workflow, "--input", '{"id": "x?status=404"}', "--wait", "-o", "json"
    )
    assert result.returncode == 1, result.stderr
    run = json.loads(result.stdout)
    assert run["status"] == "FAILED"
    return str(run["id"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_api_that_is_not_running(serve_api: Stack) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    down = serve_api.cli("runs", "list", api_url=url)
    assert_refused(
        down,
        4,
        f"cannot reach the SchemaBridge API at {url}: connection refused; start "
        "`schemabridge serve` or set --api-url",
    )
    # A watch waits for an API not there yet, within --reconnect-for, saying so once
    # (test_cli_api_restart.py); then the same one error line.
    watch = serve_api.cli("runs", "watch", "some-run", "--reconnect-for", "1", api_url=url)
    waiting, error = watch.stderr.splitlines()
    assert watch.returncode == 4 and waiting.startswith("warning: "), watch.stderr
    assert error.startswith("error: ") and "connection refused" in error, watch.stderr


def test_an_address_that_is_not_the_api(serve_api: Stack) -> None:
    # The demo downstream answers any path with a JSON echo: not the API's answers.
    other = serve_api.cli("runs", "list", api_url=serve_api.downstream)
    said = assert_refused(
        other,
        4,
        f"error: {serve_api.downstream} may not be a SchemaBridge API: it answered GET /runs "
        "with JSON this CLI does not understand (at items: Field required); check --api-url "
        "(SCHEMABRIDGE_API_URL), or if it is one, whether this CLI is as new as the API",
    )
    assert len(said.splitlines()) == 1
    assert_refused(serve_api.cli("workflows", "list", api_url="ftp://example"), 2, "not an http://")


def test_missing_wrong_and_tenant_keys(serve_api: Stack, failed: str) -> None:
    none = serve_api.cli("runs", "list", key="")
    assert_refused(none, 4, "an API key is required", "--api-key or SCHEMABRIDGE_API_KEY")
    wrong = serve_api.cli("runs", "show", failed, key="sbk_not-a-key")
    assert_refused(wrong, 4, "unknown, revoked or expired", "schemabridge keys create --admin")

    created = subprocess.run(
        [SCHEMABRIDGE, "keys", "create", "--tenant", "acme"],
        env=serve_api.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    tenant_key = created.stdout.strip()
    assert_refused(serve_api.cli("destinations", "list", key=tenant_key), 4, "admin key")
    # `whoami` says which key a command sends and what it may do, before a refusal does.
    who = serve_api.ok("whoami", key=tenant_key).stdout
    assert who.startswith("key ") and f"for tenant acme at {serve_api.url}: " in who, who
    assert "need an admin key" in who
    admin = serve_api.ok("whoami").stdout
    assert admin.startswith("admin key ") and "every tenant" in admin, admin
    assert serve_api.json("whoami", key=tenant_key)["tenantId"] == "acme"
    assert_refused(serve_api.cli("whoami", key="sbk_not-a-key"), 4, "unknown, revoked or expired")
    # Another tenant's run reads as a run that does not exist.
    assert_refused(serve_api.cli("runs", "show", failed, key=tenant_key), 1, f"no run '{failed}'")


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "show"],
        ["runs", "watch"],
        ["runs", "logs"],
        ["runs", "children"],
        ["runs", "retry"],
        ["runs", "cancel"],
        ["runs", "start-over"],
        ["runs", "reprocess"],
    ],
    ids=" ".join,
)
def test_an_unknown_run_is_one_line(serve_api: Stack, command: list[str]) -> None:
    # The same words whichever layer refuses (the store for retry and cancel, the operations
    # for the reads): the id quoted.
    assert_refused(serve_api.cli(*command, "no-such-run"), 1, "no run 'no-such-run'")


def test_unknown_workflows_and_steps(serve_api: Stack, workflow: str, failed: str) -> None:
    assert_refused(serve_api.cli("runs", "submit", "nope"), 1, "no published workflow 'nope'")
    assert_refused(serve_api.cli("workflows", "show", "nope@3"), 1, "nope")
    # A typo: the line says which name was meant.
    typo = workflow.replace("lookup", "lokup")
    for command in (["runs", "submit", typo], ["workflows", "show", typo]):
        # (another module's workflows may share this `serve`: a second name may be offered)
        said = assert_refused(serve_api.cli(*command), 1, f"did you mean '{workflow}'")
        assert said.count("did you mean") == 1, said  # the API's hint, not the CLI's as well
    # A version never published: the API's line names the versions there are (as a run
    # filter's does), so the CLI adds no command of its own.
    said = assert_refused(serve_api.cli("workflows", "show", f"{workflow}@9"), 1)
    assert said == f"error: workflow '{workflow}' has no version 9; its only version is 1\n"
    assert_refused(serve_api.cli("runs", "show", "no-such-run"), 1, "`schemabridge runs list`")
    # A filter naming a workflow that does not exist is refused, not "no runs".
    for command in (["runs", "list"], ["runs", "retry", "--status", "FAILED"]):
        filtered = serve_api.cli(*command, "--workflow", typo)
        assert_refused(filtered, 1, f"no published workflow '{typo}'; did you mean '{workflow}'")
    step_typo = serve_api.cli("runs", "resolve", failed, "gett", "--output", "1")
    said = assert_refused(step_typo, 1, "has no step gett; did you mean 'get'?")
    assert said.count("did you mean") == 1, said
    unknown_step = serve_api.cli("runs", "resolve", failed, "nope", "--output", "1")
    assert_refused(unknown_step, 1, "nope")


def test_bad_input_is_a_usage_error(serve_api: Stack, workflow: str, tmp_path: Path) -> None:
    not_json = serve_api.cli("runs", "submit", workflow, "--input", "{id: 1}")
    assert_refused(not_json, 2, "--input is not valid JSON", "(a file is given as @path)")
    missing = serve_api.cli("runs", "submit", workflow, "--input", f"@{tmp_path}/none.json")
    assert_refused(missing, 2, "cannot read --input file", "No such file or directory")
    invalid = serve_api.cli("runs", "submit", workflow, "--input", '{"id": 5}')
    stderr = assert_refused(invalid, 2, "does not match the inputSchema of cli-errors-lookup")
    assert stderr.splitlines()[1] == "  /id  id must be a string, not an integer.  [schema]"

    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "b", "vertices": {"x": {"type": "GATEWAY", "config": {}}}}')
    published = serve_api.cli("workflows", "publish", str(broken))
    stderr = assert_refused(published, 2, "nothing was published")
    assert f"  {broken} /vertices/x/config  " in stderr and "[missing_field]" in stderr
    # The same name in two files: the second is named, and so is the first, as a file.
    first, second = tmp_path / "v1.json", tmp_path / "v2.json"
    for path, url in ((first, "http://127.0.0.1:9/a"), (second, "http://127.0.0.1:9/b")):
        call = {"type": "GATEWAY", "config": {"url": url}}
        path.write_text(json.dumps({"name": "twice", "vertices": {"call": call}}))
    twice = serve_api.cli("workflows", "publish", str(first), str(second))
    stderr = assert_refused(twice, 2, "nothing was published")
    assert f"  {second} /name  " in stderr and f"already used ({first} at /name)" in stderr
    assert "request at" not in stderr
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{")
    assert_refused(serve_api.cli("workflows", "publish", str(garbage)), 2, "is not valid JSON")
    resolve = serve_api.cli("runs", "resolve", "r", "v", "--output", "nope")
    assert_refused(resolve, 2, "--output is not valid JSON")


def test_a_key_written_twice_is_refused_before_sending(
    serve_api: Stack, workflow: str, tmp_path: Path
) -> None:
    # json.loads would keep DELETE without a word; publish reads files as `validate` does.
    twice = tmp_path / "twice.json"
    twice.write_text(
        '{"name": "twice-method", "vertices": {"call": {"type": "GATEWAY", "config": '
        '{"url": "http://127.0.0.1:9/", "method": "POST", "method": "DELETE"}}}}'
    )
    published = serve_api.cli("workflows", "publish", str(twice))
    stderr = assert_refused(published, 2, "nothing was published")
    assert f'  {twice} /vertices/call/config/method  The key "method" appears more' in stderr
    assert "twice-method" not in serve_api.ok("workflows", "list").stdout
    amount = '{"amount": 1, "amount": 100}'
    submitted = serve_api.cli("runs", "submit", workflow, "--input", amount)
    assert_refused(submitted, 2, '--input /amount: The key "amount" appears more')
    output = tmp_path / "output.json"
    output.write_text('{"status": 200, "body": {"ok": true, "ok": false}}')
    resolve = serve_api.cli("runs", "resolve", "r", "v", "--output", f"@{output}")
    assert_refused(resolve, 2, f'{output} /body/ok: The key "ok" appears more')


def test_an_action_on_a_run_in_the_wrong_state(
    serve_api: Stack, workflow: str, failed: str
) -> None:
    assert_refused(serve_api.cli("runs", "cancel", failed), 1, "has already ended (FAILED)")
    ok = serve_api.cli("runs", "submit", workflow, "--input", '{"id": "c1"}', "--wait")
    assert ok.returncode == 0, ok.stderr
    done = json.loads(
        serve_api.ok(
            "runs", "list", "--workflow", workflow, "--status", "SUCCEEDED", "-o", "json"
        ).stdout
    )["items"][0]["id"]
    assert_refused(serve_api.cli("runs", "retry", done), 1, "is SUCCEEDED; only a FAILED run")


def test_usage_errors(serve_api: Stack) -> None:
    # Typos in a command or an option: one line with click's fix and where the help is.
    typo = serve_api.cli("runs", "list", "--statuss", "FAILED")
    assert_refused(
        typo, 2, "No such option: --statuss", "--status", "`schemabridge runs list --help`"
    )
    # Said as a misspelt command's fix is (the tour read "(Possible options: --status)").
    assert "error: No such option: --statuss. Did you mean '--status'? (see" in typo.stderr
    command = serve_api.cli("runs", "lsit")
    assert_refused(command, 2, "No such command 'lsit'. Did you mean 'list'")
    assert_refused(serve_api.cli("runs", "show"), 2, "Missing argument 'RUN'")
    limit = serve_api.cli("runs", "list", "--limit", "0")
    assert_refused(limit, 2, "--limit '0': give a whole number from 1 to 10000")
    assert_refused(serve_api.cli("runs", "retry"), 2, "give the runs to retry, or a filter")
    assert_refused(serve_api.cli("runs", "retry", "a", "--status", "FAILED"), 2, "not both")
    assert_refused(serve_api.cli("runs", "list", "--status", "DONE"), 2, "unknown status 'DONE'")
    # A typo of one is named (the tour's 'FAILD').
    faild = serve_api.cli("runs", "list", "--status", "FAILD")
    assert_refused(faild, 2, "unknown status 'FAILD' (did you mean 'FAILED'?); one of RUNNING")
    candidat = serve_api.cli("runs", "list", "--route", "candidat")
    assert_refused(candidat, 2, "unknown route 'candidat' (did you mean 'candidate'?); one of")
    # No run is ever PENDING (runs are created RUNNING): the filter does not offer it.
    pending = serve_api.cli("runs", "list", "--status", "PENDING")
    assert_refused(pending, 2, "unknown status 'PENDING'")
    assert_refused(serve_api.cli("runs", "list", "--since", "soon"), 2, "--since 'soon'")
    assert_refused(serve_api.cli("runs", "list", "--until", "soon"), 2, "--until 'soon'")
    assert_refused(serve_api.cli("runs", "submit", "w@0"), 2, "the version after @")
    # Without --wait nothing waits: a --timeout there was meant for a wait the user forgot.
    unbounded = serve_api.cli("runs", "submit", "w", "--timeout", "5")
    assert_refused(unbounded, 2, "--timeout: only bounds --wait; add --wait")


def test_debug_shows_the_traceback(serve_api: Stack) -> None:
    result = serve_api.cli("runs", "show", "no-such-run", "--debug")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "error: no run 'no-such-run'" in result.stderr


def test_an_unknown_tenant_filter_is_said_beside_no_runs(serve_api: Stack) -> None:
    """A new user's tour: `runs list --tenant defualt` answered "no runs" alone, where `tenants
    set-rate defualt` names 'default'. An empty list filtered by a tenant nobody knows says so,
    with the known tenant it may have meant; a known tenant with no runs is "no runs"."""
    serve_api.ok("tenants", "set-rate", "hints-acme", "600")  # known, without runs
    known = serve_api.ok("runs", "list", "--tenant", "hints-acme")
    assert known.stderr.strip() == "no runs (child runs are shown with --all)"
    typo = serve_api.ok("runs", "list", "--tenant", "hints-acmee")
    assert typo.stderr.strip() == (
        "no runs (child runs are shown with --all); no tenant 'hints-acmee' is known "
        "(did you mean 'hints-acme'?)"
    )
    far = serve_api.ok("runs", "list", "--tenant", "zzz-nobody-qq", "--all")
    assert far.stderr.strip() == (
        "no runs; no tenant 'zzz-nobody-qq' is known (`schemabridge tenants list` shows the "
        "known ones)"
    )


def test_a_name_with_a_slash_is_said_to_be_the_mistake(serve_api: Stack) -> None:
    """No name holds '/': said of the name, not "not a SchemaBridge API this command knows"."""
    for args, name in (
        (("workflows", "show", "a/b"), "a/b"),
        (("tenants", "show", "x/y"), "x/y"),
    ):
        said = assert_refused(serve_api.cli(*args), 2, f"{name!r} holds '/'")
        assert "is not a SchemaBridge API" not in said, said
