"""`SCHEMABRIDGE_TRUSTED_PROXIES` over real HTTP (docs/security.md, 'The access log'): the
access log's `client` is the connection's peer unless that peer is a trusted proxy; then it is
the right-most address of `X-Forwarded-For` that is not a trusted proxy. Served by real
uvicorn on loopback, in this process (`ApiServer`) and as `schemabridge api` and `serve`
processes; a malformed list refuses to start in one line."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.cli.exit_codes import ExitCode
from api.rest.middleware import RequestObserver
from tests.e2e.rest_harness import access_lines, client, schemabridge, service, serving, upgraded
from tests.e2e.test_access_log_processes import access_lines as process_access_lines
from tests.e2e.test_access_log_processes import embedded_env

CLIENT = "203.0.113.7"
FORGED = "198.51.100.1"
XFF = "X-Forwarded-For"


def observed_app() -> FastAPI:
    """One route behind the access log's observer (`RequestObserver`, as `create_app` adds it)."""
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(RequestObserver)
    return app


async def logged_client(
    trusted: str, headers: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> str | None:
    """The `client` of the access-log line of one request sent with `headers` from 127.0.0.1
    to a server trusting `trusted`."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="api.rest.access"):
        async with serving(observed_app(), trusted_proxies=trusted) as url, client(url) as http:
            answered = await http.get("/ping", headers=headers)
    assert answered.status_code == 200, answered.text
    [line] = access_lines(caplog.records)
    client_address: str | None = line["client"]
    return client_address


@pytest.mark.parametrize(
    ("trusted", "headers", "expected"),
    [
        # A trusted peer's header names the client.
        ("127.0.0.1", [(XFF, CLIENT)], CLIENT),
        ("127.0.0.0/8, ::1", [(XFF, CLIENT)], CLIENT),
        # Nothing trusted (the default): the peer, whatever the header says.
        ("", [(XFF, CLIENT)], "127.0.0.1"),
        # The peer is not among the trusted: its header is ignored.
        ("10.0.0.0/8", [(XFF, CLIENT)], "127.0.0.1"),
        ("::1", [(XFF, CLIENT)], "127.0.0.1"),
        # The right-most untrusted hop: the client wrote the left-most, our proxy the last.
        ("127.0.0.1", [(XFF, f"{FORGED}, {CLIENT}")], CLIENT),
        # A trusted hop on the right (a second proxy of ours) is skipped.
        ("127.0.0.1,10.0.0.0/8", [(XFF, f"{FORGED}, {CLIENT}, 10.1.2.3")], CLIENT),
        # Several headers are one list, in order.
        ("127.0.0.1", [(XFF, FORGED), (XFF, CLIENT)], CLIENT),
        # Every hop trusted: the left-most (a proxy of ours sent the request itself).
        ("127.0.0.1,10.0.0.0/8", [(XFF, "10.1.2.3, 10.4.5.6")], "10.1.2.3"),
        # Only X-Forwarded-For is read: `Forwarded` (RFC 7239) never, even from a trusted peer.
        ("127.0.0.1", [("Forwarded", f"for={CLIENT}")], "127.0.0.1"),
        # A trusted peer that sends no header is the client itself.
        ("127.0.0.1", [], "127.0.0.1"),
        # IPv6 clients as a proxy writes them.
        ("127.0.0.1", [(XFF, "2001:db8::7")], "2001:db8::7"),
    ],
)
async def test_the_client_is_the_right_most_untrusted_hop_of_a_trusted_peer(
    trusted: str,
    headers: list[tuple[str, str]],
    expected: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert await logged_client(trusted, headers, caplog) == expected


async def redirected_to(trusted: str) -> str:
    """Where a trailing-slash redirect (the one reader of the scheme, an absolute URL) sends a
    request from 127.0.0.1 that says `X-Forwarded-Proto: https`, to a server trusting
    `trusted`."""
    async with serving(observed_app(), trusted_proxies=trusted) as url, client(url) as http:
        moved = await http.get("/ping/", headers={"X-Forwarded-Proto": "https"})
    assert moved.status_code == 307, moved.text
    location: str = moved.headers["location"]
    return location


async def test_a_trusted_peer_s_forwarded_proto_is_the_scheme_of_a_redirect() -> None:
    assert (await redirected_to("127.0.0.1")).startswith("https://127.0.0.1:")


async def test_an_untrusted_peer_s_forwarded_proto_is_ignored() -> None:
    assert (await redirected_to("10.0.0.0/8")).startswith("http://127.0.0.1:")


def test_api_and_serve_believe_the_proxies_the_setting_names(tmp_path: Path) -> None:
    """Both front doors read the setting (`api.cli.services._listen`): from 127.0.0.1, trusted,
    the header names the client; the chain's forged left-most entry is never it."""
    env = upgraded(embedded_env(tmp_path, trusted_proxies="127.0.0.1"))
    for command in ("api", "serve"):
        args = [command, "--port", "0", "--access-log", "all"]
        with service(args, env, tmp_path / f"{command}.log") as running:
            with httpx.Client(base_url=running.wait_for_url(), trust_env=False) as http:
                for forwarded in (CLIENT, f"{FORGED}, {CLIENT}"):
                    sent = http.get("/health", headers={"X-Forwarded-For": forwarded})
                    assert sent.status_code == 200, sent.text
                assert http.get("/health").status_code == 200
            assert running.stop(signal.SIGTERM) == 0
        clients = [line["client"] for line in process_access_lines(running.stderr())]
        assert clients == [CLIENT, CLIENT, "127.0.0.1"], (command, running.stderr())


def test_without_the_setting_a_process_logs_the_peer(tmp_path: Path) -> None:
    env = upgraded(embedded_env(tmp_path))
    with service(["api", "--port", "0"], env, tmp_path / "api.log") as running:
        with httpx.Client(base_url=running.wait_for_url(), trust_env=False) as http:
            assert http.get("/health", headers={"X-Forwarded-For": CLIENT}).status_code == 200
        assert running.stop(signal.SIGTERM) == 0
    assert [line["client"] for line in process_access_lines(running.stderr())] == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10.0.0.0/33", "'10.0.0.0/33' has a bad prefix length ('33' is not a valid netmask)"),
        ("abc", "'abc' is not an address or a CIDR network"),
        ("*", "'*' (every peer) is not accepted: any client could then set its own address"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [["api", "--port", "0"], ["serve", "--port", "0"], ["worker", "--health-port", "0"]],
    ids=["api", "serve", "worker"],
)
def test_a_malformed_list_refuses_to_start_in_one_line(
    command: list[str], value: str, problem: str, tmp_path: Path
) -> None:
    refused = schemabridge(embedded_env(tmp_path, trusted_proxies=value), *command)
    assert refused.returncode == ExitCode.USAGE, (refused.stdout, refused.stderr)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: invalid setting SCHEMABRIDGE_TRUSTED_PROXIES: the trusted-proxy list "
        f"has 1 bad entry: {problem}. Each entry is an address (10.1.2.3, fd00::1) or a CIDR "
        "network (10.0.0.0/8, fd00::/8) of your proxies, separated by commas; empty trusts none."
    ], refused.stderr
    assert refused.stdout == "", "it never started"
