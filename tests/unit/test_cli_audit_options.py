"""`audit list`'s filters refused by the API, said in the words of the options the user typed
(api/cli/audit.py): `--action` and `--subject-kind` with the value meant, not the query
parameter and its enum."""

from __future__ import annotations

from api.cli.audit import ACTIONS, SUBJECT_KINDS, option_refusal
from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from engine.store.models import AuditAction, AuditSubject


def enum_refusal(pointer: str) -> ApiFailure:
    problem = {"pointer": pointer, "code": "enum", "message": "Input should be …", "in": "query"}
    return ApiFailure(
        f"query {pointer}: Input should be …",
        ExitCode.USAGE,
        status=422,
        code="invalid_request",
        details={"problems": [problem]},
    )


def test_the_cli_knows_the_audits_actions_and_subject_kinds() -> None:
    assert set(ACTIONS) == {action.value for action in AuditAction}
    assert set(SUBJECT_KINDS) == {kind.value for kind in AuditSubject}


def test_a_misspelt_action_names_the_option_and_the_action_meant() -> None:
    said = option_refusal(enum_refusal("/action"), "key.revokd", None)
    assert said.message == (
        "--action 'key.revokd' is not an audit action; did you mean 'key.revoked'?"
    )
    assert (said.exit_code, said.code) == (ExitCode.USAGE, "invalid_request")


def test_a_kind_close_to_none_lists_the_kinds() -> None:
    said = option_refusal(enum_refusal("/subjectKind"), None, "wf")
    assert said.message == (
        "--subject-kind 'wf' is not a kind of subject: one of workflow, api_key, tenant, "
        "destination, secret, runs"
    )
    assert option_refusal(enum_refusal("/subjectKind"), None, "secrets").message == (
        "--subject-kind 'secrets' is not a kind of subject; did you mean 'secret'?"
    )


def test_any_other_refusal_is_left_as_the_api_said_it() -> None:
    cursor = ApiFailure("invalid cursor", ExitCode.USAGE, status=422, code="invalid_cursor")
    assert option_refusal(cursor, "key.revoked", None) is cursor
