"""A failed call's stored `request` read back as a view (engine/operations/run_views.py): as
the gateway writes it, from rows written before it was kept, and from a log line's free-form
data that only looks like it."""

from __future__ import annotations

from typing import Any

import pytest

from engine.operations.run_views import error_view, sent_view
from engine.operations.views import SentRequestView
from schemas.errors import FailureKind, HttpDetail, SentRequest, StepFailure

SENT = SentRequest(
    method="POST",
    url="https://api.example.com/orders?key=***",
    header_names=("X-Api-Key", "Content-Type"),
    body_excerpt='{"token":"***"}',
    body_bytes=15,
)


def test_the_gateways_record_reads_back_whole() -> None:
    failure = StepFailure(
        FailureKind.HTTP_ERROR, "POST …: 422", http=HttpDetail(status=422, request=SENT)
    )
    view = error_view(failure.as_dict())
    assert view is not None
    assert view.request == SentRequestView(
        method="POST",
        url="https://api.example.com/orders?key=***",
        header_names=["X-Api-Key", "Content-Type"],
        body_excerpt='{"token":"***"}',
        body_bytes=15,
        body_truncated=False,
    )
    # Lists and progress streams read the summary only.
    summary = error_view(failure.as_dict(), sent=False)
    assert summary is not None and summary.request is None and summary.http_status == 422


def test_an_error_recorded_before_it_was_kept_has_none() -> None:
    older = {"kind": "http_error", "message": "m", "http": {"status": 400, "attempts": 1}}
    view = error_view(older)
    assert view is not None and view.request is None
    assert "request" not in HttpDetail(status=400).as_dict()


@pytest.mark.parametrize(
    "stored",
    [None, "POST /x", [], {"url": "https://a.example/"}, {"method": "GET", "url": 7}],
)
def test_data_that_is_not_the_record_is_no_request(stored: Any) -> None:
    assert sent_view(stored) is None


def test_odd_fields_fall_back_rather_than_fail() -> None:
    view = sent_view(
        {
            "method": "GET",
            "url": "https://a.example/",
            "headerNames": ["A", 3, None],
            "bodyExcerpt": 12,
            "bodyBytes": True,
            "bodyTruncated": "yes",
        }
    )
    assert view == SentRequestView(method="GET", url="https://a.example/", header_names=["A"])
