"""The repository explains itself (docs/architecture.md, 'Testing').

* No comment, docstring or document cites the design notes, the style notes or the source files
  the project was specified from: they live outside the repository, so a reader cannot follow
  the citation. The benchmark results in bench/ are historical records and keep their wording.
* Every relative link in docs/*.md and README.md points at a file that exists (and, for a link
  with an anchor into a Markdown file, at a heading that exists).
* Every section a comment cites as "docs/architecture.md, '<heading>'" (or docs/authoring.md,
  docs/security.md) is a heading of that document.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HISTORICAL = re.compile(r"^bench/(RESULTS|results-[^/]+)\.md$")
"""Benchmark reports: records of what was measured and said at the time, left as written."""
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()
"""Not scanned for citations: its examples of what the checks must find cite on purpose."""

SKIPPED_DIRS = {"__pycache__", "node_modules", "build", "dist"}
"""Besides hidden directories (except `.ci`) and `*.egg-info`: generated, not the project's."""
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".db", ".sqlite", ".pyc", ".whl"}
MAX_SCANNED_BYTES = 2_000_000

OUTSIDE_CITATIONS = {
    "a section of the design or style notes": re.compile(r"\b(?:DESIGN|STYLE)\s*§", re.I),
    "the design or style notes": re.compile(r"\b(?:DESIGN|STYLE)\.md\b"),
    "the source files' folder": re.compile(r"\bseeds?/"),
    "a source file by number": re.compile(r"\bseeds?\s+0\d\d\b", re.I),
    "a source file by name": re.compile(r"\b\d{3}_[0-9a-f]{16}\.txt\b"),
    "the source files": re.compile(r"\bthe seeds?['\u2019]", re.I),
    "a path outside the repository": re.compile(r"/work/(?:shared|briefs)\b"),
}

CITED_SECTION = re.compile(r"docs/(architecture|authoring|security)\.md,[\s#\-]*'([^'\n]+)'")
"""`docs/architecture.md, 'The store as the queue'`, also with the quote on the next line of a
docstring or a `#` / `--` comment."""

MARKDOWN_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`+[^`\n]*`+")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


# ── what the checks read ──────────────────────────────────────────────────────────────────


def repository_files(root: Path) -> Iterator[Path]:
    """Every file of the project under `root`, in a stable order (hidden directories other than
    `.ci`, caches and build output left out)."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in SKIPPED_DIRS
            and not d.endswith(".egg-info")
            and (not d.startswith(".") or d == ".ci")
        )
        for name in sorted(files):
            yield Path(directory) / name


def scanned_text(path: Path) -> str | None:
    """The file as text, or None for binary, huge or undecodable files."""
    if path.suffix.lower() in BINARY_SUFFIXES or path.stat().st_size > MAX_SCANNED_BYTES:
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def project_texts(root: Path) -> Iterator[tuple[str, str]]:
    """(path relative to `root`, text) of every scanned file, historical records left out."""
    for path in repository_files(root):
        relative = path.relative_to(root).as_posix()
        if HISTORICAL.match(relative) or (root == ROOT and relative == THIS_FILE):
            continue
        text = scanned_text(path)
        if text is not None:
            yield relative, text


def markdown_documents(root: Path) -> list[Path]:
    """README.md and docs/*.md: the documents whose links must resolve."""
    return sorted([root / "README.md", *(root / "docs").glob("*.md")])


# ── the checks, as functions of text ──────────────────────────────────────────────────────


def outside_citations(text: str) -> list[tuple[int, str, str]]:
    """(line number, what is cited, the line) of every citation of a document that is not in
    the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in OUTSIDE_CITATIONS.items():
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """The headings of a Markdown text, outside code blocks, as written."""
    return [m.group(1) for m in HEADING.finditer(FENCE.sub("", markdown))]


def anchors(markdown: str) -> set[str]:
    """Every anchor GitHub gives the headings (a repeated heading gets `-1`, `-2`, …)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(markdown):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_targets(markdown: str) -> list[str]:
    """Targets of the inline and reference links of a Markdown text, outside code."""
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    return [m.group(1) for m in MARKDOWN_LINK.finditer(prose)] + [
        m.group(1) for m in REFERENCE_LINK.finditer(prose)
    ]


def broken_links(document: Path, markdown: str) -> list[str]:
    """The relative links of `document` that point at nothing, each with the reason."""
    broken = []
    for target in link_targets(markdown):
        if URL_SCHEME.match(target):
            continue  # http(s), mailto: not this repository's files
        path_part, _, anchor = target.partition("#")
        resolved = (document.parent / path_part).resolve() if path_part else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and resolved.suffix == ".md" and resolved.is_file():
            text = markdown if resolved == document else resolved.read_text(encoding="utf-8")
            if anchor not in anchors(text):
                broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


def cited_sections(text: str) -> list[tuple[str, str]]:
    """(document, heading) of every "docs/<document>.md, '<heading>'" citation in `text`."""
    return [(m.group(1), m.group(2)) for m in CITED_SECTION.finditer(text)]


# ── the repository ────────────────────────────────────────────────────────────────────────


def test_no_comment_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path}:{number}: cites {what}: {line}"
        for path, text in project_texts(ROOT)
        for number, what, line in outside_citations(text)
    ]
    assert found == [], "point at docs/architecture.md or say the reason in place"


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = [
        f"{document.relative_to(ROOT)}: {problem}"
        for document in markdown_documents(ROOT)
        for problem in broken_links(document, document.read_text(encoding="utf-8"))
    ]
    assert broken == []


def test_every_cited_section_exists() -> None:
    documents = {
        name: set(headings((ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")))
        for name in ("architecture", "authoring", "security")
    }
    cited = [
        (path, document, heading)
        for path, text in project_texts(ROOT)
        for document, heading in cited_sections(text)
    ]
    missing = [
        f"{path}: docs/{document}.md has no section '{heading}'"
        for path, document, heading in cited
        if heading not in documents[document]
    ]
    assert missing == []
    assert len(cited) > 40, "the comments point at their sections; the scan found too few"


def test_the_scan_reads_comments_in_every_kind_of_file() -> None:
    scanned = {path for path, _ in project_texts(ROOT)}
    for expected in ("Makefile", ".ci/run", "admission/lua/exchange.lua", "README.md"):
        assert expected in scanned
    assert THIS_FILE not in scanned
    assert "bench/RESULTS.md" not in scanned
    assert not any(path.startswith(".git/") for path in scanned)


# ── the checks themselves, on texts made to break them ───────────────────────────────────

# The examples are assembled from parts, so that a plain text search of the repository for
# these citations (grep) finds none in this file either.
S = "\N{SECTION SIGN}"
SEED = "seed"


@pytest.mark.parametrize(
    "line",
    [
        f'"""Layered circuit breakers (DESIGN {S}6)."""',
        f"# one command each (STYLE {S}13)",
        f"-- see design {S}4 for the table",
        "(DESIGN.md names httpx)",
        f"names from {SEED} 000",
        f"fan-out as durable child runs ({SEED} 004)",
        f"read /work/shared/{SEED}s/000_84721f5c59e3d397.txt",
        f"the {SEED}s' bare `<NAME>`",
        f"the {SEED}'s `cb:tenant:` namespace",
    ],
)
def test_a_citation_of_an_outside_document_is_found(line: str) -> None:
    assert {number for number, _, _ in outside_citations(f"ok\n{line}\n")} == {2}


@pytest.mark.parametrize(
    "line",
    [
        "`rng` seeds the wait jitter (tests).",
        '"""Spreads redispatches; tests seed it."""',
        "parser.add_argument('--seed', type=int)",
        "state.rng.seed(config.seed)",
        "the design: docs/architecture.md, 'Admission'",
        f"a {S}-sign alone, DESIGNATED, STYLESHEET.css",
    ],
)
def test_ordinary_words_are_not_citations(line: str) -> None:
    assert outside_citations(line) == []


def test_historical_results_are_not_scanned_but_everything_else_is(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "RESULTS.md").write_text(f"(DESIGN {S}4 still names httpx)\n")
    (tmp_path / "bench" / "results-fanout.md").write_text(f"{SEED} 004\n")
    (tmp_path / "bench" / "notes.md").write_text(f"{SEED} 004\n")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(f"# STYLE {S}13\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text(f"# DESIGN {S}1\n")
    (tmp_path / "picture.png").write_bytes(b"\x89PNG\0DESIGN \xc2\xa71")
    scanned = dict(project_texts(tmp_path))
    assert sorted(scanned) == [".ci/run", "bench/notes.md"]
    assert all(outside_citations(text) for text in scanned.values())


def test_anchors_follow_github(tmp_path: Path) -> None:
    text = "# Title\n## The store as the queue\n## HTTP-layer retries\n## Notes\n## Notes\n"
    text += "```\n## not a heading\n```\n## `Store.claim` and 'leases'\n"
    assert anchors(text) == {
        "title",
        "the-store-as-the-queue",
        "http-layer-retries",
        "notes",
        "notes-1",
        "storeclaim-and-leases",
    }


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "workflow.schema.json").write_text("{}")
    (tmp_path / "docs" / "other.md").write_text("# Other\n## Deep section\n")
    document = tmp_path / "docs" / "guide.md"
    text = "\n".join(
        [
            "# Guide",
            "## Here",
            "[ok](../schemas/workflow.schema.json) [dir](../schemas) [web](https://example.com)",
            "[anchor](other.md#deep-section) [self](#here) ![img](other.md)",
            "[gone](missing.md) [bad anchor](other.md#nowhere) [bad self](#there)",
            "`[in code](nowhere.md)`",
            "```",
            "[in a block](nowhere.md)",
            "```",
            "[ref]: ../schemas/absent.json",
        ]
    )
    document.write_text(text)
    assert broken_links(document, text) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with anchor #nowhere",
        "#there: no heading with anchor #there",
        "../schemas/absent.json: no such file",
    ]


def test_cited_sections_are_read_across_lines_and_comment_markers() -> None:
    text = (
        '"""Retries (docs/architecture.md,\n'
        '\'HTTP-layer retries\')."""\n'
        "# see docs/architecture.md,\n"
        "# 'Redis keys'\n"
        "-- docs/authoring.md, 'Validation'\n"
        "docs/architecture.md (no section)\n"
    )
    assert cited_sections(text) == [
        ("architecture", "HTTP-layer retries"),
        ("architecture", "Redis keys"),
        ("authoring", "Validation"),
    ]


def test_the_readme_names_every_status_of_the_rest_error_table() -> None:
    """The README's list of the REST API's error statuses is what an operator reads when an
    answer surprises them (a 415 to `curl -d` without a Content-Type): every status of the
    table in `api.rest.errors` is in it."""
    import api.rest.errors

    table = re.findall(r"^\|[^|]+\|\s*(\d{3})\s*\|", api.rest.errors.__doc__ or "", re.M)
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    listed = readme.split("The REST API answers JSON, errors included", 1)[1].split("Every time")[0]
    missing = sorted({status for status in table if status not in listed})
    assert table and not missing, f"README's error statuses lack {missing}"


def test_the_readme_says_where_a_candidate_run_names_its_deployment() -> None:
    """`deploymentId` is in a single run's answer only (lists and the submission answer give
    the route): the README must not promise it on every run."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    sentence = readme.split("a candidate's run names its deployment", 1)[1][:200]
    assert "GET /runs/{id}" in sentence, sentence


def test_a_step_never_sent_again_needs_both_retry_settings() -> None:
    """`maxAutoRetries: 0` stops only the engine's redispatches: the GATEWAY's in-process
    retries (`retry.maxAttempts`, 4 by default) still send the call again after a 5xx or a
    timeout. Where the guide and the reference advise 0 for a side effect, they say
    `maxAttempts` 1 as well."""
    from schemas import loader

    guide = " ".join((ROOT / "docs" / "authoring.md").read_text(encoding="utf-8").split())
    advice = guide.split("`maxAutoRetries` (default 3", 1)[1].split("Any other failure", 1)[0]
    assert "`maxAutoRetries: 0`" in advice and '"maxAttempts": 1' in advice, advice
    vertex = loader.workflow_schema()["$defs"]["vertex"]["properties"]
    described = vertex["maxAutoRetries"]["description"]
    assert "maxAutoRetries 0 and retry.maxAttempts 1" in described, described


def test_the_configuration_table_names_every_setting() -> None:
    """docs/architecture.md, 'Configuration' says every setting is in its table: an operator
    looking for a knob (PgBouncer's transaction mode, a document's expression count) reads
    that table, so a setting left out of it is one they never learn of."""
    from engine.settings import Settings

    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([A-Z][A-Z_]+)`", table))
    missing = sorted(name.upper() for name in Settings.model_fields if name.upper() not in named)
    assert not missing, f"docs/architecture.md's settings table lacks {missing}"


def test_the_docs_name_a_tenant_in_a_rest_query_as_tenant_id() -> None:
    """A tenant is `tenantId` in every query string; `tenant` is still taken, deprecated, so a
    route the docs spell with it works, but a client generated from /openapi.json marks it
    deprecated and a reader copies the old name. The monitor's own page URLs (`#/runs?…`)
    are not REST routes."""
    old = re.compile(r"`(?:(?:GET|POST|PUT|PATCH|DELETE) )?/[^`\s]*[?&]tenant=")
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        found += [f"{path.name}: {match.group(0)}" for match in old.finditer(text)]
    assert not found, found


def test_the_readme_says_which_metric_names_a_tenant() -> None:
    """The README says what no metric label carries (an operator's cardinality budget); the
    api's series that do carry a tenant (`api.rest.metrics`) are named there as the
    exception, as docs/monitoring.md names them."""
    import api.rest.metrics

    with_tenant = re.findall(
        r"`(schemabridge_\w+)\{[^}]*\btenant\b", api.rest.metrics.__doc__ or ""
    )
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    sentence = readme.split("no label carries", 1)[1].split(". ", 1)[0]
    assert with_tenant and all(series in sentence for series in with_tenant), sentence


def test_the_guides_python_example_runs_as_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A developer copies the authoring guide's Python example into a shell at the clone's
    root: it runs there as it is (no name left for the reader to define) and validates the
    documents it reads."""
    guide = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    examples = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert examples
    monkeypatch.chdir(ROOT)
    for example in examples:
        exec(compile(example, "docs/authoring.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "order-export" in printed and "support-ticket" in printed, printed
