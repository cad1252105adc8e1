"""What `--help` says about arguments (api/cli/usage.py): written as command lines write them
(`RUN`, `[RUN...]`, `FILE...`), each named once, and usage errors as one line."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from api.cli import app


def help_of(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def usage_line(text: str) -> str:
    return " ".join(text.split("\n\n", 1)[0].split())


def test_arguments_read_as_command_lines_write_them() -> None:
    assert usage_line(help_of("run")) == "Usage: schemabridge run [OPTIONS] FILE..."
    assert usage_line(help_of("runs", "retry")).endswith("[OPTIONS] [RUN...]")
    assert usage_line(help_of("runs", "resolve")).endswith("[OPTIONS] RUN VERTEX")
    assert usage_line(help_of("validate")).endswith("[OPTIONS] FILE...")
    assert usage_line(help_of("workflows", "publish")).endswith("[OPTIONS] FILE...")


def test_each_argument_is_named_once() -> None:
    for command in (["run"], ["runs", "show"], ["runs", "retry"], ["validate"]):
        text = help_of(*command)
        assert "{" not in usage_line(text), command
        arguments = text.split("Arguments:\n", 1)[1].split("\n\n", 1)[0]
        for row in arguments.splitlines():
            words = row.split()
            if words and re.fullmatch(r"[A-Z\[\].]+", words[0]):
                assert words[1] != words[0], (command, row)


def test_the_api_options_say_what_they_take() -> None:
    text = help_of("runs", "watch")
    assert "--api-url URL" in text and "--api-key KEY" in text
