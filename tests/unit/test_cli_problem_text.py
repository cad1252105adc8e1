"""The one way CLI commands write a problem: pointer, message, code."""

from __future__ import annotations

import pytest

from api.cli.problem_text import ROOT, problem_line, split_first, where


def test_the_root_has_one_rendering_and_slash_is_the_empty_key() -> None:
    assert where("") == ROOT == "(document)"
    assert where("", "input") == "input (document)"
    assert where("/") == "/"
    assert where("/a~1b", "f.json") == "f.json /a~1b"


def test_a_line_carries_the_code_when_there_is_one() -> None:
    assert problem_line("/x", "x is wrong.", "schema") == "  /x  x is wrong.  [schema]"
    assert problem_line("", "not JSON.", "", "f.json") == "  f.json (document)  not JSON."


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("/0/vertices/a", ("0", "/vertices/a")),
        ("/0", ("0", "")),
        ("/0/", ("0", "/")),
        ("", ("", "")),
    ],
)
def test_split_first_keeps_the_element_itself_apart_from_its_empty_key(
    pointer: str, expected: tuple[str, str]
) -> None:
    assert split_first(pointer) == expected


def test_publish_says_problems_as_validate_does_with_their_code() -> None:
    from api.cli.client_errors import ApiFailure
    from api.cli.exit_codes import ExitCode
    from api.cli.workflows import Origin, _located

    problems = [
        {"pointer": "/0", "code": "model", "message": "Wrong as a whole."},
        {"pointer": "/1/name", "code": "duplicate_workflow", "message": "used (request at /0)"},
    ]
    refused = ApiFailure(
        "refused", ExitCode.USAGE, code="invalid_workflow", details={"problems": problems}
    )
    origins = [Origin("a.json", None), Origin("b.json", 0)]
    assert _located(refused, origins).message.splitlines()[1:] == [
        "  a.json (document)  Wrong as a whole.  [model]",
        "  b.json[0] /name  used (a.json at (document))  [duplicate_workflow]",
    ]


def test_a_broken_connection_is_said_without_the_reasons_full_stop() -> None:
    # A second new user's tour read "…broke: Server disconnected without sending a
    # response.; reconnecting for up to 1 min" during an API restart.
    import httpx

    from api.cli.client_errors import transport_failure

    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    failure = transport_failure(lost, "http://127.0.0.1:8000", 30)
    assert str(failure).endswith("broke: Server disconnected without sending a response"), failure
