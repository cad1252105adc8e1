"""`make demo`: the web run monitor, with something to show in it.

    python -m demo.monitor [--port 8000] [--keep]

Starts `schemabridge serve --demo` (the examples published, the demo downstream started,
authentication off) on a fresh SQLite file, then, through the REST API and the downstream's
control routes only, sets the scene:

- a fan-out (`nightly-subscription-renewals`, 400 subscriptions) whose downstream answers
  slowly enough to watch the bar move, three of whose charges are declined once (402): those
  children fail and wait as dead letters; "Reprocess dead letters" succeeds, since each
  declined answer is scripted once;
- one run that fails (`support-ticket`: the helpdesk answers 422 with a JSON body), which
  "Retry" then recovers, for the same reason;
- a few runs of the other examples, which succeed.

It prints the URL to open and runs until Ctrl-C, which stops the service gracefully (the
service gets the same SIGINT from the terminal; this script waits for it to finish).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 40.0
SIGNAL_REACHED_S = 3.0
"""How long the service may take to show it got the terminal's Ctrl-C before it is sent a
SIGTERM itself (when this script was interrupted some other way)."""
DECLINED = (7, 19, 23)
"""Subscription ids whose first charge the downstream declines."""
FANOUT_SIZE = 400
LATENCY_MS = 600
"""The downstream's answer time while the demo runs: slow enough to watch a fan-out."""
DATABASE = Path(".demo-monitor.db")
LOCK = Path(".demo-monitor.lock")
"""Held while a demo runs here: a second `make demo` must not delete the first's database."""


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


def _call(url: str, body: Any = None, method: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method or ("GET" if data is None else "POST")
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def _submit(api: str, workflow: str, run_input: Any, tenant: str) -> str:
    answer = _call(f"{api}/workflows/{workflow}/runs", {"input": run_input, "tenantId": tenant})
    return str(answer["id"])


def seed(api: str, downstream: str) -> dict[str, str]:
    """Script the downstream and submit the runs; returns {what: run id}."""
    _call(f"{downstream}/_config", {"latencyMs": LATENCY_MS})
    declined = {
        "status": 402,
        "body": {"error": "card_declined", "message": "The card was declined by the issuer."},
    }
    for subscription in DECLINED:
        path = f"/billing/subscriptions/{subscription}/charges"
        _call(f"{downstream}/_script", {"path": path, "responses": [declined]})
    rejected = {
        "status": 422,
        "body": {"error": "validation_failed", "detail": "priority 'urgent' is not allowed"},
    }
    _call(f"{downstream}/_script", {"path": "/helpdesk/tickets", "responses": [rejected]})
    runs = {
        "failing": _submit(
            api,
            "support-ticket",
            {"customerId": "cus_1042", "subject": "Invoice address is wrong"},
            "acme",
        ),
        "contacts": _submit(
            api,
            "crm-contact-sync",
            {"updatedSince": "2025-06-30T00:00:00Z", "pageSize": 20, "listId": "newsletter"},
            "globex",
        ),
        "orders": _submit(
            api, "order-export", {"batchId": "2025-07-01-eu", "orderCount": 30}, "acme"
        ),
        "fanout": _submit(
            api,
            "nightly-subscription-renewals",
            {"batchSize": FANOUT_SIZE, "renewalDate": "2025-07-01", "currency": "EUR"},
            "acme",
        ),
    }
    return runs


def _read_urls(out: IO[str], process: subprocess.Popen[str]) -> tuple[str, str]:
    """The API's and the downstream's URLs, from the service's first stdout lines."""
    api = downstream = None
    deadline = time.monotonic() + READY_TIMEOUT_S
    for line in out:  # bounded: the service prints a handful of lines, then the URL
        if line.startswith("demo downstream at "):
            downstream = line.rsplit(" ", 1)[1].strip()
        elif " listening on " in line:
            api = line.rsplit(" ", 1)[1].strip()
        if api and downstream:
            return api, downstream
        if time.monotonic() > deadline:
            break
    code = process.poll()
    raise DemoError(
        "schemabridge serve did not start"
        + ("" if code is None else f" (exit {code}); see its message above")
    )


def _hold_lock() -> IO[bytes]:
    """Lock `LOCK` for this process's life (the kernel drops it when the process ends, even
    killed): a second demo in this folder is refused before it touches the database."""
    held = LOCK.open("ab")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.close()
        raise DemoError(
            f"another `make demo` is running in this folder (it holds {LOCK}); stop it with "
            "Ctrl-C first, or open the URL it printed"
        ) from None
    return held


def _check_port(host: str, port: int) -> None:
    """Refuse a taken port before anything is started or deleted."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            raise DemoError(
                f"{host}:{port} is taken by another process: make demo PORT={port + 1}"
            ) from None


def _fresh_database(keep: bool) -> str:
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            DATABASE.with_name(DATABASE.name + suffix).unlink(missing_ok=True)
    return f"sqlite+aiosqlite:///{DATABASE.resolve()}"


def _banner(api: str, runs: dict[str, str]) -> None:
    ui = f"{api}/ui/"
    print(
        "\n".join(
            [
                "",
                "SchemaBridge monitor — demo",
                f"  open   {ui}",
                f"  a fan-out of {FANOUT_SIZE} children, three of them declined:",
                f"         {ui}#/runs/{runs['fanout']}",
                f"  a failed run to retry:  {ui}#/runs/{runs['failing']}",
                "  Ctrl-C stops the service.",
                "",
            ]
        ),
        flush=True,
    )


class _Terminated(Exception):
    """SIGTERM reached this script alone (a `kill`, a supervisor, a timeout), not the service."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.monitor", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--keep", action="store_true", help=f"keep {DATABASE} from last time")
    args = parser.parse_args(argv)
    schemabridge = str(Path(sys.executable).with_name("schemabridge"))
    try:
        lock = _hold_lock()
        _check_port(args.host, args.port)
    except DemoError as error:
        print(f"make demo: {error}", file=sys.stderr)
        return 1
    env_database = _fresh_database(args.keep)
    command = [schemabridge, "serve", "--demo", "--host", args.host, "--port", str(args.port)]
    command += ["--no-access-log", "--log-level", "warning"]
    env = {**os.environ, "SCHEMABRIDGE_DATABASE_URL": env_database}
    # Same process group as this script: Ctrl-C reaches the service directly. A SIGTERM is
    # sent to one process: this script passes it on, or the service would outlive it.
    signal.signal(signal.SIGTERM, _terminated)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        if process.stdout is None:
            raise DemoError("no output from schemabridge serve")
        api, downstream = _read_urls(process.stdout, process)
        _banner(api, seed(api, downstream))
        code = process.wait()
        # The service got the terminal's Ctrl-C too and may have ended before this script
        # saw its own (the kernel can hand the signal to another of its threads): that Ctrl-C
        # has nothing left to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        return _stop(process)
    except _Terminated:
        process.send_signal(signal.SIGTERM)
        return _stop(process, signalled=True)
    except (DemoError, OSError) as error:
        print(f"make demo: {error}", file=sys.stderr)
        _stop(process)
        return 1
    finally:
        lock.close()
    if code != 0:
        print(f"make demo: schemabridge serve exited with code {code}", file=sys.stderr)
        return code
    print("stopped.", flush=True)
    return 0


def _stop(process: subprocess.Popen[str], *, signalled: bool = False) -> int:
    """Stop the service gracefully: it normally got the terminal's SIGINT too (`signalled`:
    this script sent it SIGTERM); if it is still running shortly after, it is sent SIGTERM
    (a second signal would cut its drain short); killed if it outlives `STOP_TIMEOUT_S`."""
    try:
        if not signalled:
            try:
                process.wait(timeout=SIGNAL_REACHED_S)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    except (KeyboardInterrupt, _Terminated):  # another Ctrl-C or SIGTERM: stop now
        process.kill()
        process.wait()
    print("stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
