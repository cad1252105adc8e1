"""engine.validation: the public API, the schema phase and the graph checks."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest

from engine.settings import Settings
from engine.validation import (
    check_documents,
    parse_document,
    parse_documents,
    spawned_workflows,
    validate_input,
)
from schemas.definitions import GatewayVertex, MergeVertex, SpawnerVertex, Workflow
from schemas.errors import DefinitionError, Problem

URL = "http://127.0.0.1:8765/x"


def gateway(*deps: str, **config: Any) -> dict[str, Any]:
    vertex: dict[str, Any] = {"type": "GATEWAY", "config": {"url": URL, **config}}
    if deps:
        vertex["dependsOn"] = list(deps)
    return vertex


def spawner(workflow: str = "child", *deps: str, **config: Any) -> dict[str, Any]:
    vertex: dict[str, Any] = {
        "type": "SPAWNER",
        "config": {"items": [1, 2], "workflow": workflow, **config},
    }
    if deps:
        vertex["dependsOn"] = list(deps)
    return vertex


def merge(*deps: str, **config: Any) -> dict[str, Any]:
    vertex: dict[str, Any] = {"type": "MERGE", "dependsOn": list(deps)}
    if config:
        vertex["config"] = config
    return vertex


def workflow(name: str = "wf", **vertices: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "vertices": vertices}


CHILD = workflow("child", call=gateway())


def found(document: Any, **kwargs: Any) -> list[tuple[str, str]]:
    """(pointer, code) of every problem in `document` (a JSON value), sorted."""
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document), **kwargs)
    return [(p.pointer, p.code) for p in caught.value.problems]


# ── the public API ──────────────────────────────────────────────────────────────────────────


def test_a_valid_document_gives_typed_workflows_with_defaults() -> None:
    [wf] = parse_document(json.dumps(workflow(a=gateway(), b=gateway("a", method="POST"))))
    assert isinstance(wf, Workflow)
    assert wf.name == "wf"
    a, b = wf.vertices["a"], wf.vertices["b"]
    assert isinstance(a, GatewayVertex) and isinstance(b, GatewayVertex)
    assert a.config.method == "GET"
    assert a.config.retry.max_attempts == 4
    assert a.max_auto_retries == 3
    assert b.depends_on == ["a"]
    assert wf.roots() == ["a"]


def test_a_list_document_gives_its_workflows_in_order() -> None:
    parent = workflow("parent", fan=spawner(), join=merge("fan"))
    parsed = parse_document(json.dumps([parent, CHILD]).encode())
    assert [w.name for w in parsed] == ["parent", "child"]
    assert isinstance(parsed[0].vertices["fan"], SpawnerVertex)
    join = parsed[0].vertices["join"]
    assert isinstance(join, MergeVertex)
    assert join.config.tolerate_child_failures == []


def test_the_schema_hint_for_editors_is_accepted() -> None:
    document = {"$schema": "../schemas/workflow.schema.json", **workflow(a=gateway())}
    [wf] = parse_document(json.dumps(document))
    assert wf.name == "wf"


def test_no_documents_give_no_workflows() -> None:
    assert parse_documents([]) == []


def test_problems_carry_the_source_they_belong_to() -> None:
    good = ("good.json", json.dumps(workflow("good", a=gateway())))
    bad = ("bad.json", json.dumps(workflow("bad", a=gateway("nope"))))
    with pytest.raises(DefinitionError) as caught:
        parse_documents([good, bad])
    assert [(p.source, p.pointer) for p in caught.value.problems] == [
        ("bad.json", "/vertices/a/dependsOn/0")
    ]
    assert caught.value.code == "invalid_workflow"


def test_check_documents_reports_per_document() -> None:
    report = check_documents([("a.json", json.dumps(workflow("a", x=gateway()))), ("b.json", "{")])
    assert not report.valid
    first, second = report.documents
    assert first.valid and [w.name for w in first.workflows] == ["a"]
    assert not second.valid and second.workflows == []
    assert report.workflows == first.workflows


def test_without_settings_the_documented_defaults_apply_not_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCHEMABRIDGE_MAX_DOCUMENT_BYTES", "10")
    assert parse_document(json.dumps(workflow(a=gateway())))


def test_every_problem_is_reported_at_once() -> None:
    document = workflow(
        a=gateway("b", method="FETCH"),
        b=gateway("a", body="{{ vertices.zz.output }}"),
        c={"type": "GATEWAY", "config": {"url": URL, "colour": "red"}},
        d=merge("a"),
    )
    assert found(document) == [
        ("/vertices/a/config/method", "schema"),
        ("/vertices/a/dependsOn/0", "cycle"),
        ("/vertices/b/config/body", "unknown_vertex_reference"),
        ("/vertices/c/config/colour", "unknown_field"),
        ("/vertices/d/dependsOn", "merge_needs_one_spawner"),
    ]


# ── schema phase wording ────────────────────────────────────────────────────────────────────


def messages(document: Any) -> dict[str, str]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    return {p.pointer: p.message for p in caught.value.problems}


def test_schema_messages_are_plain_sentences_with_pointers() -> None:
    document = workflow(
        a={
            "type": "GATEWAY",
            "maxAutoRetries": 101,
            "config": {"url": URL, "timeoutMs": "soon", "urll": 1, "retry": {"jitter": "x"}},
        },
        b={"type": "SPAWNER", "config": {"items": [], "workflow": "bad name"}},
    )
    got = messages(document)
    assert got["/vertices/a/maxAutoRetries"] == "maxAutoRetries must be at most 100; got 101."
    assert got["/vertices/a/config/timeoutMs"] == "timeoutMs must be an integer, not a string."
    assert (
        got["/vertices/a/config/urll"]
        == 'Unknown field "urll" in GATEWAY config. Did you mean "url"?'
    )
    assert got["/vertices/a/config/retry/jitter"] == (
        'jitter must be one of "none" or "full"; got "x".'
    )
    assert got["/vertices/b/config/workflow"].startswith("workflow must be a workflow name")


def test_a_timeout_too_short_for_any_http_call_is_refused() -> None:
    got = messages(workflow(a=gateway(timeoutMs=1), b=gateway(timeoutMs=99), c=gateway()))
    assert got == {
        "/vertices/a/config/timeoutMs": "timeoutMs must be at least 100; got 1.",
        "/vertices/b/config/timeoutMs": "timeoutMs must be at least 100; got 99.",
    }
    [published] = parse_document(json.dumps(workflow(a=gateway(timeoutMs=100))))
    assert isinstance(published.vertices["a"], GatewayVertex)
    assert published.vertices["a"].config.timeout_ms == 100


def test_a_version_stored_with_a_shorter_timeout_still_loads() -> None:
    # Published before the floor: the store builds its model without the schema, so it loads
    # and runs as it did.
    stored = Workflow.model_validate(workflow(a=gateway(timeoutMs=1)))
    assert isinstance(stored.vertices["a"], GatewayVertex)
    assert stored.vertices["a"].config.timeout_ms == 1


def test_a_value_close_to_one_of_the_allowed_ones_is_offered_in_its_own_case() -> None:
    got = messages(
        workflow(
            a={"type": "gateway", "config": {"url": URL}},
            b={"type": "GATEWY", "config": {"url": URL}},
            c={"type": "GATEWAY", "config": {"url": URL, "retry": {"jitter": "FULL"}}},
            d={"type": "SPAWNS", "config": {}},
        )
    )
    one_of = 'type must be one of "GATEWAY", "SPAWNER" or "MERGE"; got '
    assert got["/vertices/a/type"] == one_of + '"gateway". Did you mean "GATEWAY"?'
    assert got["/vertices/b/type"] == one_of + '"GATEWY". Did you mean "GATEWAY"?'
    assert got["/vertices/d/type"] == one_of + '"SPAWNS". Did you mean "SPAWNER"?'
    assert got["/vertices/c/config/retry/jitter"] == (
        'jitter must be one of "none" or "full"; got "FULL". Did you mean "full"?'
    )


def test_a_missing_field_points_at_the_object_that_lacks_it() -> None:
    got = messages({"vertices": {"a": {"type": "GATEWAY"}}})
    assert got == {
        "": 'The workflow is missing the required field "name".',
        "/vertices/a": 'Vertex "a" is missing the required field "config".',
    }


def test_an_unknown_field_without_a_close_match_lists_the_allowed_ones() -> None:
    got = messages({**workflow(a=gateway()), "owner": "me"})
    assert got["/owner"] == (
        'Unknown field "owner" in the workflow. Allowed fields: "$schema", "name", '
        '"description", "inputSchema" and "vertices".'
    )


def test_an_invalid_input_schema_is_reported_inside_it() -> None:
    document = {**workflow(a=gateway()), "inputSchema": {"type": "strnig", "minimum": "1"}}
    assert sorted(messages(document)) == ["/inputSchema/minimum", "/inputSchema/type"]


def test_pointers_escape_slash_and_tilde() -> None:
    document = workflow(a=gateway(headers={"X-A": 1}, query={"a/b~c": {"x": 1}}))
    assert "/vertices/a/config/query/a~1b~0c" in messages(document)


def test_a_root_that_is_not_a_workflow_is_explained() -> None:
    assert messages(3) == {
        "": "The document must be a workflow (a JSON object) or a list of workflows, "
        "not an integer."
    }


# ── graph phase ─────────────────────────────────────────────────────────────────────────────


def test_unknown_dependency_suggests_a_close_name() -> None:
    got = messages(workflow(fetch=gateway(), store=gateway("fetsh")))
    assert got["/vertices/store/dependsOn/0"] == (
        'Vertex "store" depends on "fetsh", which is not a vertex of this workflow. '
        'Did you mean "fetch"?'
    )


def test_self_dependency() -> None:
    assert found(workflow(a=gateway("a"))) == [("/vertices/a/dependsOn/0", "self_dependency")]


def test_a_cycle_is_named_vertex_by_vertex_in_run_order() -> None:
    document = workflow(start=gateway(), a=gateway("start", "c"), b=gateway("a"), c=gateway("b"))
    got = messages(document)
    assert list(got) == ["/vertices/a/dependsOn/1"]
    assert got["/vertices/a/dependsOn/1"].startswith("dependsOn forms a cycle: a → b → c → a ")


def test_separate_cycles_are_each_reported() -> None:
    document = workflow(a=gateway("b"), b=gateway("a"), c=gateway("d"), d=gateway("c"))
    assert found(document) == [
        ("/vertices/a/dependsOn/0", "cycle"),
        ("/vertices/c/dependsOn/0", "cycle"),
    ]


def test_a_self_dependency_is_not_also_reported_as_a_cycle() -> None:
    assert [c for _, c in found(workflow(a=gateway("a", "b"), b=gateway()))] == ["self_dependency"]


@pytest.mark.parametrize(
    ("vertices", "expected"),
    [
        ({"g": gateway(), "m": merge("g")}, 'it depends on no SPAWNER, only on GATEWAY "g".'),
        (
            {"s1": spawner(), "s2": spawner(), "m": merge("s1", "s2")},
            'it depends on 2 SPAWNERs ("s1" and "s2").',
        ),
        ({"m": merge()}, "it depends on nothing."),
        (
            {"g": gateway(), "h": gateway(), "m": merge("g", "h")},
            'it depends on no SPAWNER, only on GATEWAY "g" and GATEWAY "h".',
        ),
    ],
)
def test_a_merge_needs_exactly_one_spawner(vertices: dict[str, Any], expected: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_documents([("p", json.dumps(workflow("p", **vertices))), ("c", json.dumps(CHILD))])
    [problem] = caught.value.problems
    assert problem.code == "merge_needs_one_spawner"
    assert problem.message.endswith(expected)


def test_a_merge_may_also_wait_for_other_vertices() -> None:
    document = [workflow("p", s=spawner(), g=gateway(), m=merge("s", "g")), CHILD]
    assert len(parse_document(json.dumps(document))) == 2


def test_a_merge_on_an_unknown_vertex_reports_only_the_unknown_vertex() -> None:
    assert found(workflow(m=merge("fan"))) == [("/vertices/m/dependsOn/0", "unknown_dependency")]


def test_failure_tolerance_needs_tolerated_statuses() -> None:
    document = [
        workflow("p", s=spawner(), m=merge("s", failureTolerance={"maxFailures": 2})),
        CHILD,
    ]
    assert found(document) == [("/0/vertices/m/config/failureTolerance", "ineffective_tolerance")]


def test_too_many_vertices() -> None:
    document = {"name": "big", "vertices": {f"v{i}": gateway() for i in range(4)}}
    settings = Settings(max_vertices=3)
    assert found(document, settings=settings) == [("/vertices", "too_many_vertices")]
    assert parse_document(json.dumps(document), settings=Settings(max_vertices=4))


# ── across documents ────────────────────────────────────────────────────────────────────────


def test_a_child_workflow_may_be_in_another_document() -> None:
    parent = ("parent.json", json.dumps(workflow("parent", s=spawner("child"), m=merge("s"))))
    child = ("child.json", json.dumps(CHILD))
    assert [w.name for w in parse_documents([parent, child])] == ["parent", "child"]


@pytest.mark.parametrize("known", [["child"], ["child@3"], {"child", "other"}])
def test_a_child_workflow_may_be_already_published(known: Any) -> None:
    document = json.dumps(workflow("parent", s=spawner("child@2")))
    assert parse_document(document, known_workflows=known)


def test_a_child_workflow_no_document_holds_is_a_note_when_publication_is_unseen() -> None:
    """Offline (`known_workflows=None`) the child may be published: a note, not a problem;
    a caller that sees what is published (even nothing) still gets the problem."""
    document = [("parent.json", json.dumps(workflow("parent", s=spawner("child@2"))))]
    offline = check_documents(document, known_workflows=None)
    assert offline.valid and [w.name for w in offline.workflows] == ["parent"]
    [note] = offline.documents[0].notes
    assert (note.source, note.pointer, note.code) == (
        "parent.json",
        "/vertices/s/config/workflow",
        "unknown_workflow",
    )
    assert "offline validation cannot see published workflows" in note.message
    assert "nor published" not in note.message
    online = check_documents(document, known_workflows=[])
    assert [(p.pointer, p.code) for p in online.problems] == [
        ("/vertices/s/config/workflow", "unknown_workflow")
    ]
    assert online.documents[0].notes == []


def test_spawned_workflows_names_every_child_as_far_as_the_documents_parse() -> None:
    parent = workflow("parent", s=spawner("child@2"), t=spawner("other"), m=merge("s", "t"))
    broken = ("broken.json", '{"name": "x", "vertices": {')
    nested = ("list.json", json.dumps([CHILD, workflow("p2", s=spawner("third"))]))
    documents = [("parent.json", json.dumps(parent)), broken, nested]
    assert spawned_workflows(documents) == {"child", "other", "third"}


def test_an_unknown_child_workflow() -> None:
    document = workflow("parent", s=spawner("chlid"))
    got = messages([document, CHILD])
    assert got["/0/vertices/s/config/workflow"].endswith('Did you mean "child"?')


def test_duplicate_names_are_reported_on_the_later_document() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_documents([("one.json", json.dumps(CHILD)), ("two.json", json.dumps([CHILD]))])
    [problem] = caught.value.problems
    assert (problem.source, problem.pointer, problem.code) == (
        "two.json",
        "/0/name",
        "duplicate_workflow",
    )
    assert "one.json at /name" in problem.message


def test_spawn_loops_are_refused() -> None:
    ping = workflow("ping", s=spawner("pong"))
    pong = workflow("pong", s=spawner("ping"))
    selfish = workflow("selfish", s=spawner("selfish"))
    got = messages([ping, pong, selfish])
    assert "ping → pong → ping" in got["/0/vertices/s/config/workflow"]
    assert "selfish → selfish" in got["/2/vertices/s/config/workflow"]


# ── run input ───────────────────────────────────────────────────────────────────────────────


def test_validate_input_checks_the_input_schema() -> None:
    document = {
        **workflow(a=gateway()),
        "inputSchema": {
            "type": "object",
            "required": ["id", "name"],
            "properties": {"id": {"type": "integer"}},
        },
    }
    [wf] = parse_document(json.dumps(document))
    assert validate_input(wf, {"id": 3, "name": "n"}) == []
    assert validate_input(wf, {"id": "x", "name": "n"}) == [
        Problem("/id", "id must be an integer, not a string.", "schema")
    ]
    assert [p.message for p in validate_input(wf, {})] == [
        'The input is missing the required field "id".',
        'The input is missing the required field "name".',
    ]


def test_validate_input_without_a_schema_accepts_anything() -> None:
    [wf] = parse_document(json.dumps(workflow(a=gateway())))
    assert validate_input(wf, [1, "anything"]) == []


@pytest.mark.parametrize(
    ("input_schema", "pointer", "fragment"),
    [
        ({"$ref": "https://example.com/s.json"}, "/inputSchema/$ref", "does not fetch schemas"),
        ({"$ref": "#/$defs/nope"}, "/inputSchema/$ref", "does not point at anything"),
        (
            {"properties": {"a": {"pattern": "(("}}},
            "/inputSchema/properties/a/pattern",
            "must be a valid regular expression",
        ),
    ],
)
def test_an_input_schema_that_would_fail_at_run_time_is_refused_now(
    input_schema: dict[str, Any], pointer: str, fragment: str
) -> None:
    got = messages({**workflow(a=gateway()), "inputSchema": input_schema})
    assert list(got) == [pointer]
    assert fragment in got[pointer]


def test_local_references_in_the_input_schema_work() -> None:
    input_schema = {
        "$defs": {"id": {"type": "integer"}},
        "properties": {"a": {"$ref": "#/$defs/id"}, "b": {"const": {"$ref": "not a ref"}}},
    }
    [wf] = parse_document(json.dumps({**workflow(a=gateway()), "inputSchema": input_schema}))
    assert validate_input(wf, {"a": 1}) == []
    assert [p.pointer for p in validate_input(wf, {"a": "x"})] == ["/a"]


def test_a_reference_below_a_nested_id_is_never_fetched() -> None:
    # jsonschema's default registry fetches an unknown http(s) URI with urllib, from the
    # process that checks the input: the API process, at each submission, wherever the
    # workflow's author pointed it (the egress policy never sees that call).
    fetched: list[str] = []

    class Schemas(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Schemas)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/schemas/"
        input_schema = {"properties": {"a": {"$id": base, "$ref": "number.json"}}}
        [wf] = parse_document(json.dumps({**workflow(a=gateway()), "inputSchema": input_schema}))
        problems = validate_input(wf, {"a": "x"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert fetched == []
    assert [(p.pointer, p.code) for p in problems] == [("", "input")]
    assert "cannot be applied" in problems[0].message


def test_text_that_is_not_valid_unicode_is_refused() -> None:
    text = json.dumps({**workflow(a=gateway()), "description": "x"}).replace('"x"', '"\\ud800"')
    assert "\\ud800" in text
    assert found_raw(text) == [("/description", "not_utf8")]


def found_raw(text: str) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(text)
    return [(p.pointer, p.code) for p in caught.value.problems]


def test_a_repeated_entry_is_one_problem_per_repeat_at_its_pointer() -> None:
    deps = workflow(a=gateway(), c=gateway(), b=gateway("a", "c", "a", "c", "a"))
    assert messages(deps) == {
        "/vertices/b/dependsOn/2": 'dependsOn already lists "a" (at /vertices/b/dependsOn/0); '
        "remove this entry.",
        "/vertices/b/dependsOn/3": 'dependsOn already lists "c" (at /vertices/b/dependsOn/1); '
        "remove this entry.",
        "/vertices/b/dependsOn/4": 'dependsOn already lists "a" (at /vertices/b/dependsOn/0); '
        "remove this entry.",
    }
    # The other checks count a repeated entry once: no second self-dependency or unknown
    # vertex, and a MERGE naming its SPAWNER twice depends on one SPAWNER.
    assert found(workflow(b=gateway("b", "b"), x=gateway("y", "y"))) == [
        ("/vertices/b/dependsOn/0", "self_dependency"),
        ("/vertices/b/dependsOn/1", "schema"),
        ("/vertices/x/dependsOn/0", "unknown_dependency"),
        ("/vertices/x/dependsOn/1", "schema"),
    ]
    assert found([workflow("parent", s=spawner(), m=merge("s", "s")), CHILD]) == [
        ("/0/vertices/m/dependsOn/1", "schema")
    ]
    codes = workflow(a=gateway(successCodes=[200, 201, 200]))
    assert found(codes) == [("/vertices/a/config/successCodes/2", "schema")]


def test_repeated_input_values_are_those_json_schema_counts_equal() -> None:
    [wf] = parse_document(
        json.dumps(
            {
                "name": "wf",
                "inputSchema": {"type": "array", "uniqueItems": True},
                "vertices": {"a": gateway()},
            }
        )
    )
    values = [1, 1.0, True, {"a": 1, "b": 2}, {"b": 2, "a": 1}, "1", [1], [1.0], None, None]
    assert [p.pointer for p in validate_input(wf, values)] == ["/1", "/4", "/7", "/9"]
    assert validate_input(wf, [1, True, "1", [1], {"1": 1}, None, 0, False]) == []


def test_a_wrong_case_type_is_said_and_the_vertex_checked_as_meant_in_one_pass() -> None:
    bad_url = {"type": "gateway", "config": {"url": "127.0.0.1/b", "timeoutMs": 0}}
    merged = {"type": "merge", "dependsOn": ["b"]}
    document = [workflow("p", b=bad_url, fan=spawner(), j=merged), CHILD]
    assert found(document) == [
        ("/0/vertices/b/config/timeoutMs", "schema"),
        ("/0/vertices/b/config/url", "schema"),
        ("/0/vertices/b/type", "schema"),
        ("/0/vertices/j/dependsOn", "merge_needs_one_spawner"),
        ("/0/vertices/j/type", "schema"),
    ]
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    said = {p.pointer: p.message for p in caught.value.problems}
    assert said["/0/vertices/b/type"].endswith('got "gateway". Did you mean "GATEWAY"?')
    assert 'only on GATEWAY "b"' in said["/0/vertices/j/dependsOn"]


def problems_said(document: Any) -> dict[str, str]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    return {p.pointer: p.message for p in caught.value.problems}


def test_a_single_value_where_an_array_belongs_is_shown_as_that_array() -> None:
    said = problems_said(workflow(a=gateway(successCodes=200), b={**gateway(), "dependsOn": "a"}))
    assert said["/vertices/a/config/successCodes"] == (
        "successCodes must be an array, e.g. [200]; got an integer."
    )
    assert said["/vertices/b/dependsOn"] == 'dependsOn must be an array, e.g. ["a"]; got a string.'


@pytest.mark.parametrize("items", ["{{ input.list }} ", "list: {{ input.list }}"])
def test_items_with_text_around_its_expression_says_to_remove_it(items: str) -> None:
    said = problems_said([workflow("p", fan=spawner(items=items)), CHILD])
    assert said["/0/vertices/fan/config/items"].endswith(
        'Remove the text around the expression: write "{{ input.list }}".'
    )


def test_a_url_with_text_before_its_expression_gets_no_items_hint() -> None:
    said = problems_said(workflow(a=gateway(url=" {{ input.url }}")))
    assert "Remove the text" not in said["/vertices/a/config/url"]


@pytest.mark.parametrize(
    "url",
    [
        "https://user\\@api.example.com/x",  # urllib: host api.example.com; a browser: user
        "https://api.example.com\\@evil.example/x",
        "https://api.example.com\\x",
    ],
)
def test_a_backslash_before_the_urls_path_is_refused_at_publication(url: str) -> None:
    """From a security tour: such a URL published, then every run of it failed at the call
    (the HTTP client refuses a backslash in the authority, as RFC 3986 does), and readers
    disagree on its host: urllib says the text after '@', a browser the text before '\\'."""
    said = problems_said(workflow(a=gateway(url=url)))
    assert said["/vertices/a/config/url"].startswith(
        "url must be an absolute http:// or https:// URL with no backslash before its path"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/a\\b",
        "https://api.example.com?q=\\",
        "https://user:p%5Cw@api.example.com/x",
        "https://{{ input.host }}/x",
        "{{ input.base }}\\x",
    ],
)
def test_a_backslash_in_the_path_or_query_is_still_published(url: str) -> None:
    parse_document(json.dumps(workflow(a=gateway(url=url))))
