"""A refused value in words: one wording for the CLI's settings and the REST API's queries."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from schemas import value_problems
from schemas.value_problems import problem_in_words


def _problem(annotation: object, given: str) -> dict[str, object]:
    with pytest.raises(ValidationError) as raised:
        TypeAdapter(annotation).validate_python(given)
    return dict(raised.value.errors()[0])


@pytest.mark.parametrize(
    ("annotation", "given", "said"),
    [
        (int, "many", "should be a whole number of seconds, not 'many'"),
        (float, "7d", "should be a number of seconds, not '7d'"),
        (bool, "maybe", "should be true or false, not 'maybe'"),
        (Annotated[int, Field(ge=1)], "0", "should be at least 1 s, not '0'"),
        (Annotated[int, Field(lt=2)], "5", "should be less than 2 s, not '5'"),
        (int, "9" * 5000, "should be a whole number of fewer digits, not '" + "9" * 39 + "…'"),
    ],
)
def test_a_refused_value_says_what_it_takes_and_what_it_was_given(
    annotation: object, given: str, said: str
) -> None:
    assert problem_in_words(_problem(annotation, given), " of seconds", " s") == said


def test_a_refusal_of_another_kind_is_left_to_pydantic() -> None:
    problem = _problem(Annotated[str, Field(max_length=2)], "abc")
    assert problem_in_words(problem) is None


def test_a_body_number_is_said_and_cut_when_long() -> None:
    assert value_problems.given_number_words(150) == ", not 150"
    assert value_problems.given_number_words(2.5) == ", not 2.5"
    long = value_problems.given_number_words(10**100)
    assert long.startswith(", not 1000") and long.endswith("…") and len(long) <= 46, long
    assert value_problems.given_number_words(True) == ""
    assert value_problems.given_number_words("150") == ""
    bound = {"type": "less_than_equal", "ctx": {"le": 100.0}, "input": 150}
    assert value_problems.problem_in_words(bound) == "should be at most 100"


@pytest.mark.parametrize(
    ("annotation", "given", "said"),
    [
        (
            Annotated[str, Field(max_length=256)],
            "k" * 300,
            "should be at most 256 characters long, not 300",
        ),
        (Annotated[str, Field(min_length=1)], "", "should be at least 1 character long, not 0"),
        (Annotated[str, Field(min_length=8)], "abc", "should be at least 8 characters long, not 3"),
    ],
)
def test_a_text_refused_for_its_length_says_the_bound_and_its_length(
    annotation: object, given: str, said: str
) -> None:
    assert value_problems.length_in_words(_problem(annotation, given)) == said
    assert value_problems.length_in_words(_problem(int, "many")) is None
