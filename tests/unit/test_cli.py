from __future__ import annotations

import pytest
from click.testing import CliRunner

from ipvsproxy import __version__
from ipvsproxy.cli import main


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"ipvsproxy, version {__version__}\n"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "sync", "cleanup", "show"):
        assert f"  {command} " in result.output


@pytest.mark.parametrize("command", ["run"])
def test_unimplemented_commands_exit_2(command: str) -> None:
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 2
    assert "not implemented yet" in result.output
