"""``duet --help`` and the help of each command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pipelines.cli import app

runner = CliRunner()


def test_top_level_help_lists_the_commands() -> None:
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0, res.output
    for cmd in ("run", "load", "speed", "batch", "serve", "query", "ui"):
        assert cmd in res.output


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("run", ["--lake", "--bootstrap", "--limit", "--json"]),
        ("load", ["--bootstrap", "--limit", "--lake"]),
        ("speed", ["--bootstrap", "--follow", "--lake", "--limit"]),
        ("batch", ["--lake", "--bootstrap", "--limit"]),
        ("serve", ["--lake", "--host", "--port"]),
        ("ui", ["--load", "--yes", "--limit", "--lake", "--bootstrap"]),
    ],
)
def test_command_help(command: str, options: list[str]) -> None:
    res = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    for opt in options:
        assert opt in res.output, f"{command} --help lacks {opt}"


def test_bad_limit_is_a_usage_error() -> None:
    res = runner.invoke(app, ["run", "--limit", "0"])
    assert res.exit_code == 2


def test_an_unreachable_broker_exits_with_2(tmp_path: object) -> None:
    res = runner.invoke(app, ["run", "--bootstrap", "127.0.0.1:1", "--limit", "10", "--lake", str(tmp_path)])
    assert res.exit_code == 2
    assert "duet run: cannot reach Kafka at 127.0.0.1:1" in res.output


@pytest.mark.parametrize("command", ["run", "load", "speed", "batch", "serve", "query", "init"])
def test_flags_read_as_flags(command: str) -> None:
    """No ``<bool>`` after a flag (``--json``, ``--help``): it takes no value."""
    res = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output, res.output
    assert "--help" in res.output
    if command == "run":
        assert "<int range>" in res.output  # an option with a value still shows its type
