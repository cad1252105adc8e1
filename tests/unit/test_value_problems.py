"""A refused value in words: one wording for the CLI's settings and the REST API's queries."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

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
