"""How the command line turns what the REST API (or the network) answered into one message and
an exit code: the single place that maps HTTP to the CLI's exit codes.

| what happened                                    | exit code            |
| ------------------------------------------------ | -------------------- |
| 404 for a run, a workflow, a step, a key         | 1 `FAILED`           |
| 409 (a run or step in a state the action refuses)| 1 `FAILED`           |
| 429 (quota used up: how to raise it; ready queue | 1 `FAILED`           |
| full: when to try again)                         |                      |
| 5xx from the API (its database unreachable, ...) | 1 `FAILED`           |
| 400, 413, 422 (the request itself is wrong)      | 2 `USAGE`            |
| 401, 403                                         | 4 `UNREACHABLE`      |
| connection refused, DNS, timeout, TLS            | 4 `UNREACHABLE`      |
| an answer that is not the API's JSON, or a 404   | 4 `UNREACHABLE`      |
| for a route the API does not have                |                      |

Every message is one line saying what went wrong and how to fix it; a 422 adds one line per
problem, with its JSON pointer.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from api.cli.exit_codes import ExitCode
from api.cli.problem_text import problem_line
from schemas.counts import plural

if TYPE_CHECKING:
    import httpx


class ApiFailure(Exception):
    """A request the command could not complete: `message` is for the operator (its first line
    says what and how to fix it), `exit_code` ends the command."""

    def __init__(
        self,
        message: str,
        exit_code: ExitCode,
        *,
        status: int | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        transient: bool = False,
        dropped: bool = False,
        unsent: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.code = code
        self.details = details or {}
        self.transient = transient
        """Worth another try by a command that follows a run: no answer at all (the API
        restarting, a dropped connection) or a 5xx (the API or a proxy in front of it failing
        for now). A 4xx or an answer this CLI does not understand would come back the same."""
        self.dropped = dropped
        """No answer because nothing listened (connection refused) or the connection broke:
        what an API restarting looks like to a client between two requests (a stopping one
        closes its listener first), unlike a timeout or a name that does not resolve."""
        self.unsent = unsent
        """The request never reached a server (no connection was made), so it changed
        nothing: sending it again is safe even where a repeat is not (a submission without an
        idempotency key)."""


KEY_HINT = (
    "pass a key with --api-key or SCHEMABRIDGE_API_KEY "
    "(an admin creates one: `schemabridge keys create --admin`)"
)
URL_HINT = "start `schemabridge serve` or set --api-url (SCHEMABRIDGE_API_URL)"


def _os_reason(error: BaseException) -> str:
    """The innermost OS-level reason of a transport error ("connection refused", ...)."""
    seen: BaseException | None = error
    for _ in range(10):  # a short cause chain; bounded all the same
        if seen is None:
            break
        if isinstance(seen, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    # Without its full stop: the reason goes inside a sentence ("…; reconnecting"), where
    # aiohttp's "Server disconnected without sending a response." read ".;".
    text = str(error).strip().rstrip(".")
    lowered = text.lower()
    if "connection refused" in lowered or "connect call failed" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "the host name does not resolve"
    return text or type(error).__name__


def transport_failure(error: httpx.TransportError, api_url: str, timeout_s: float) -> ApiFailure:
    """The API could not be reached at all (exit 4)."""
    import httpx  # loaded by the session that raised `error`; the commands' modules need not

    if isinstance(error, httpx.TimeoutException):
        message = (
            f"the SchemaBridge API at {api_url} did not answer within {timeout_s:g} s; "
            "check that it is up and --api-url is right"
        )
    elif isinstance(error, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        # Reached, then lost: the API (or a proxy in front of it) closed the connection.
        message = f"the connection to the SchemaBridge API at {api_url} broke: {_os_reason(error)}"
        return ApiFailure(message, ExitCode.UNREACHABLE, transient=True, dropped=True)
    elif isinstance(error, httpx.UnsupportedProtocol):
        message = f"--api-url {api_url!r} is not an http:// or https:// URL"
        return ApiFailure(message, ExitCode.USAGE)
    else:
        reason = _os_reason(error)
        message = f"cannot reach the SchemaBridge API at {api_url}: {reason}; {URL_HINT}"
        refused = reason in {"connection refused", "connection reset by peer"}
        unsent = isinstance(error, httpx.ConnectError)
        return ApiFailure(
            message, ExitCode.UNREACHABLE, transient=True, dropped=refused, unsent=unsent
        )
    return ApiFailure(message, ExitCode.UNREACHABLE, transient=True)


def _error_body(response: httpx.Response) -> dict[str, Any] | None:
    """The API's `{"code", "message", "details"}`, or None for any other answer (a proxy's
    HTML page, another service)."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        return body
    return None


def _problem_lines(details: dict[str, Any]) -> list[str]:
    problems = details.get("problems")
    if not isinstance(problems, list):
        return []
    lines = []
    for problem in problems:
        if isinstance(problem, dict):
            pointer, within = str(problem.get("pointer") or ""), str(problem.get("in") or "")
            message, code = str(problem.get("message", "")), str(problem.get("code", ""))
            lines.append(problem_line(pointer, message, code, within))
    return lines


def _says_its_one_problem(message: str, details: dict[str, Any]) -> bool:
    """Whether the message already says the answer's only problem (the API's message for one
    invalid header is "header /Idempotency-Key: …", an operation's is the problem's own
    text): listed again under it, the same words would be printed twice."""
    problems = details.get("problems")
    if not isinstance(problems, list) or len(problems) != 1 or not isinstance(problems[0], dict):
        return False
    said = str(problems[0].get("message", ""))
    return bool(said) and (message == said or message.endswith(f": {said}"))


def _quota_line(message: str, details: dict[str, Any]) -> str:
    """A used-up run quota in one line with its fix. The quota counts runs created, so "try
    again later" would never come true; an API that does not say whose quota (older than
    `details.tenantId`) keeps its message, without the wait."""
    tenant, max_runs = details.get("tenantId"), details.get("maxRuns")
    if not isinstance(tenant, str) or not isinstance(max_runs, int):
        return f"{message}; an admin raises it with `schemabridge tenants set-quota TENANT N`"
    return (
        f"tenant {tenant} used its quota of {plural(max_runs, 'run')}; raise it with "
        f"`schemabridge tenants set-quota {tenant} N` or remove it with "
        f"`schemabridge tenants reset-quota {tenant}`"
    )


def _retry_after(response: httpx.Response) -> str:
    value = response.headers.get("Retry-After")
    return f"; try again in {value} s" if value and value.isdigit() else "; try again later"


def _limited(response: httpx.Response, code: str, message: str, details: dict[str, Any]) -> str:
    """A 429: a used-up quota says how to raise it; any other limit when to try again."""
    if code == "quota_exceeded":
        return _quota_line(message, details)
    return f"{message}{_retry_after(response)}"


def _no_route(response: httpx.Response, api_url: str, message: str) -> tuple[str, ExitCode]:
    """A 404 for a route the server does not have: a name that held `/` (sent as %2F in one
    segment, read decoded by the server), or not a SchemaBridge API of this version."""
    named = _slashed_name(response)
    if named is not None:
        return (
            f"{named!r} holds '/', which no workflow, version, tenant or key name does: "
            "check the name",
            ExitCode.USAGE,
        )
    return (
        f"{api_url} is not a SchemaBridge API this command knows ({message}); "
        "check --api-url (SCHEMABRIDGE_API_URL)",
        ExitCode.UNREACHABLE,
    )


def _slashed_name(response: httpx.Response) -> str | None:
    """The name in the request's path that holds a `/` (sent encoded as one segment), if any."""
    for part in response.request.url.raw_path.split(b"?")[0].split(b"/"):
        if b"%2f" in part.lower():
            return unquote(part.decode("ascii", "replace"))
    return None


def _with_state(message: str, details: dict[str, Any]) -> str:
    state = details.get("state")
    if isinstance(state, str) and state not in message:
        return f"{message} (it is {state})"
    return message


def response_failure(response: httpx.Response, api_url: str) -> ApiFailure:
    """An error answer (status 400 or more) as the operator should read it."""
    status = response.status_code
    body = _error_body(response)
    if body is None:
        kind = response.headers.get("content-type", "no content type").partition(";")[0]
        if status >= 500:
            # A proxy or load balancer in front of the API, while the API restarts.
            return ApiFailure(
                f"{api_url} answered {status} ({kind}) instead of the SchemaBridge API: "
                "a proxy in front of an API that is down, or not the API; check --api-url",
                ExitCode.UNREACHABLE,
                status=status,
                transient=True,
            )
        return ApiFailure(
            f"{api_url} answered {status} ({kind}), not the SchemaBridge API's JSON; "
            "check --api-url (SCHEMABRIDGE_API_URL)",
            ExitCode.UNREACHABLE,
            status=status,
        )
    code: str = body["code"]
    message = str(body.get("message") or code)
    given = body.get("details")
    details: dict[str, Any] = given if isinstance(given, dict) else {}

    def failure(text: str, exit_code: ExitCode) -> ApiFailure:
        return ApiFailure(
            text, exit_code, status=status, code=code, details=details, transient=status >= 500
        )

    if status == 401:
        return failure(f"the API refused the request: {message}; {KEY_HINT}", ExitCode.UNREACHABLE)
    if status == 403:
        return failure(f"the API refused the request: {message}", ExitCode.UNREACHABLE)
    if status == 404 and code == "not_found":
        return failure(*_no_route(response, api_url, message))
    if status in (400, 413, 422):
        problems = [] if _says_its_one_problem(message, details) else _problem_lines(details)
        return failure("\n".join([message, *problems]), ExitCode.USAGE)
    if status == 409:
        return failure(_with_state(message, details), ExitCode.FAILED)
    if status == 429:
        return failure(_limited(response, code, message, details), ExitCode.FAILED)
    if status == 503:
        return failure(
            f"the API cannot serve the request now ({code}): {message}; nothing was changed, "
            "so the same command may be run again",
            ExitCode.FAILED,
        )
    if status >= 500:
        return failure(
            f"the API failed ({status} {code}): {message}; its log has the details",
            ExitCode.FAILED,
        )
    return failure(message, ExitCode.FAILED)
