"""The fix added to a "workflow not found" (api/cli/hints.py): the close names, the versions
command, the names published, or how to publish one."""

from __future__ import annotations

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.hints import amended, step_fix, workflow_fix
from schemas.close_names import close_names

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


TOUR = ["gradual_deploy", "tour-chain", "tour-child", "tour-fan"]
"""A tour's workflows with the engine's own, as a command that reads runs is given them."""


def test_the_engines_workflows_are_offered_for_a_typo_but_never_listed() -> None:
    assert workflow_fix("nope", TOUR) == "published: tour-chain, tour-child, tour-fan"
    assert workflow_fix("gradual_deplyo", TOUR) == "did you mean 'gradual_deploy'?"
    assert workflow_fix("nope", ["gradual_deploy"]) == (
        "nothing is published yet: `schemabridge workflows publish FILE...`"
    )


def test_a_name_much_closer_than_the_rest_leaves_them_out() -> None:
    # `tour-fan` shares only the prefix, enough for difflib's cutoff: not offered beside the
    # swapped letters' `tour-chain`, where `tour-child`, a letter further, still is.
    assert workflow_fix("tour-chian", TOUR) == "did you mean 'tour-chain' or 'tour-child'?"
    assert close_names("tour-chil", TOUR) == ["tour-child"]
    assert close_names("tour-ch", TOUR) == ["tour-child", "tour-chain"]  # as close, both
    assert close_names("tour", TOUR) == ["tour-fan"]


def test_the_fix_keeps_the_failure_as_it_was() -> None:
    failure = ApiFailure("no run 'r'", ExitCode.FAILED, status=404, code="run_not_found")
    fixed = amended(failure, "list them")
    assert fixed.message == "no run 'r'; list them"
    assert (fixed.exit_code, fixed.status, fixed.code) == (ExitCode.FAILED, 404, "run_not_found")


def test_a_step_typo_names_the_step_meant_or_lists_them() -> None:
    assert step_fix("open-tiket", ["lookup", "open-ticket"]) == "did you mean 'open-ticket'?"
    assert step_fix("zzz", ["lookup", "open-ticket"]) == "its steps: lookup, open-ticket"
