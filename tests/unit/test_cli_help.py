"""``--help`` on an 80-column terminal shows every command's options in full: each flag and
each setting it names can be read and copied."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from mqstore.cli import app


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in getattr(group, "commands", {}).items():
        found += _commands(command, (*path, name))
    return found


ROOT = typer.main.get_command(app)
COMMANDS = _commands(ROOT)


def _command(path: tuple[str, ...]) -> Any:
    command: Any = ROOT
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "mqstore")
def test_help_on_an_80_column_terminal_shows_every_flag_in_full(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    for param in _command(path).params:
        for flag in (*param.opts, *getattr(param, "secondary_opts", ())):
            if flag.startswith("-"):
                assert re.search(rf"(^|[\s,/]){re.escape(flag)}\b", result.output), flag


def test_help_names_every_setting_of_serve_in_full() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    flat = " ".join(result.output.split())
    for setting in ("MQSTORE_PRIORITIZED_MESSAGES", "MQSTORE_TABLE_PREFIX", "MQSTORE_JOURNAL_DIR"):
        assert setting in flat
