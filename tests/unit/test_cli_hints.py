"""The fix added to a "workflow not found" (api/cli/hints.py): the close names, the versions
command, the names published, or how to publish one."""

from __future__ import annotations

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.hints import amended, step_fix, workflow_fix

NAMES = ["crm-contact-sync", "order-export", "support-ticket"]


def test_a_typo_names_the_workflow_meant() -> None:
    assert workflow_fix("support-tiket", NAMES) == "did you mean 'support-ticket'?"
    assert workflow_fix("order-exprt", [*NAMES, "order-exports"]) == (
        "did you mean 'order-export' or 'order-exports'?"
    )


def test_a_known_name_points_at_its_versions() -> None:
    assert workflow_fix("support-ticket", NAMES) == (
        "`schemabridge workflows versions support-ticket` lists its versions"
    )


def test_nothing_close_lists_what_is_published() -> None:
    assert workflow_fix("xyzzy", NAMES) == (
        "published: crm-contact-sync, order-export, support-ticket"
    )
    many = [f"workflow-{n}" for n in range(10)]
    assert workflow_fix("xyzzy", many).endswith("workflow-7, …")
    assert workflow_fix("xyzzy", []) == (
        "nothing is published yet: `schemabridge workflows publish FILE...`"
    )


def test_the_fix_keeps_the_failure_as_it_was() -> None:
    failure = ApiFailure("no run 'r'", ExitCode.FAILED, status=404, code="run_not_found")
    fixed = amended(failure, "list them")
    assert fixed.message == "no run 'r'; list them"
    assert (fixed.exit_code, fixed.status, fixed.code) == (ExitCode.FAILED, 404, "run_not_found")


def test_a_step_typo_names_the_step_meant_or_lists_them() -> None:
    assert step_fix("open-tiket", ["lookup", "open-ticket"]) == "did you mean 'open-ticket'?"
    assert step_fix("zzz", ["lookup", "open-ticket"]) == "its steps: lookup, open-ticket"
