"""Static checks of the web monitor's files: what the page may never do with text it did not
write, that it loads nothing from elsewhere, and that every module is preloaded."""

from __future__ import annotations

import re

import ui

STATIC = ui.STATIC_DIR
MODULES = sorted(STATIC.glob("js/**/*.js"))
MARKUP_SINKS = re.compile(
    r"\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\("
    r"|createContextualFragment|DOMParser"
)


def test_no_module_turns_text_into_markup_or_code() -> None:
    found = [
        f"{path.relative_to(STATIC)}:{n}: {line.strip()}"
        for path in MODULES
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MARKUP_SINKS.search(line) and not line.lstrip().startswith(("//", "*", "/*"))
    ]
    assert found == []


def test_nothing_is_loaded_from_another_origin() -> None:
    files = [*MODULES, STATIC / "index.html", STATIC / "style.css"]
    remote = re.compile(r"""(src|href)=["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""")
    assert [str(p) for p in files if remote.search(p.read_text(encoding="utf-8"))] == []


def test_the_page_has_no_inline_script_or_style() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert "<style" not in page and " style=" not in page
    assert re.findall(r"\son[a-z]+=", page) == []


def test_every_module_is_preloaded() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', page))
    modules = {str(p.relative_to(STATIC)) for p in MODULES} - {"js/app.js"}
    assert preloaded == modules


def test_every_import_names_a_file_that_exists() -> None:
    missing = []
    for path in MODULES:
        for target in re.findall(r'from "(\.[^"]+)"', path.read_text(encoding="utf-8")):
            if not (path.parent / target).resolve().is_file():
                missing.append(f"{path.relative_to(STATIC)} imports {target}")
    assert missing == []
