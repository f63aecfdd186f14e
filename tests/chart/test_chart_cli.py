"""The container commands the chart renders are ones the CLI's own parser accepts.

Parsing (click's make_context) runs no command, so chart and CLI cannot drift apart unseen.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.core import ParameterSource

from ipvsproxy.cli import main
from tests.chart.chart_kit import pod_spec, render

OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "every flag the chart writes": {
        "metrics": {"trafficMetrics": False},
        "logging": {"verbosity": 5},
        "extraArgs": ["--ipvs-strict-arp=true"],
    },
}


def _parsed(container: dict[str, Any]) -> None:
    """Parse a container's command and args as click would, without invoking the command."""
    command_line = [*container["command"], *container["args"]]
    assert command_line[0] == "ipvsproxy"
    name, *args = command_line[1:]
    command = main.get_command(click.Context(main), name)
    assert command is not None, f"ipvsproxy has no command {name!r}"
    ctx = command.make_context(f"ipvsproxy {name}", list(args))
    flags_given = [arg for arg in args if arg.startswith("-")]
    from_command_line = [
        param
        for param in ctx.params
        if ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE
    ]
    # Each flag the chart writes set a parameter of its own; none was taken as an argument.
    assert len(from_command_line) == len(flags_given), command_line


@pytest.mark.parametrize("option", OPTIONS)
def test_the_proxy_containers_run_command_parses(option: str) -> None:
    """Needs the daemon's `run` flags (run-spec): fails while `run` is the stub."""
    (container,) = pod_spec(render(OPTIONS[option]))["containers"]
    _parsed(container)


def test_the_init_containers_command_parses() -> None:
    inits = pod_spec(render())["initContainers"]
    assert [init["name"] for init in inits] == ["kernel-parameters"]
    for init in inits:
        _parsed(init)
