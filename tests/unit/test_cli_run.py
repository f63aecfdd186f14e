"""``ipvsproxy run``'s way out (--init-only, fatal errors in the logging format asked for), and the
shell completion README documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from ipvsproxy.cli import main
from ipvsproxy.daemon import init_node
from ipvsproxy.daemon import main as daemon_main
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeKernel

EXAMPLE = "examples/cluster.yaml"


@contextmanager
def _without_ipvs() -> Iterator[Kernel]:
    raise IPVSUnavailable("No such file or directory")
    yield  # pragma: no cover


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    kernel = FakeKernel()

    @contextmanager
    def opened() -> Iterator[Kernel]:
        yield kernel.kernel()

    for module in (daemon_main, init_node):
        monkeypatch.setattr(module, "require_net_admin", lambda: None)
    monkeypatch.setattr(init_node, "real_kernel", opened)
    monkeypatch.setattr(daemon_main, "real_kernel", _without_ipvs)
    return kernel


def test_a_fatal_error_is_one_json_object_with_json_logging(fake: FakeKernel) -> None:
    args = ["run", "--source", EXAMPLE, "--logging-format", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    entry = json.loads(line)
    assert entry["level"] == "critical"
    assert entry["msg"].startswith("the kernel offers no IPVS")
    assert set(entry) >= {"ts", "level", "msg"}


def test_a_fatal_error_is_one_plain_line_with_text_logging(fake: FakeKernel) -> None:
    result = CliRunner().invoke(main, ["run", "--source", EXAMPLE])
    assert result.exit_code == 2
    assert result.stderr.startswith("ipvsproxy: the kernel offers no IPVS")
    assert len(result.stderr.splitlines()) == 1


def test_an_unexpected_error_in_json_logging_carries_its_traceback(
    fake: FakeKernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(daemon_main, "serve_daemon", broken)
    result = CliRunner().invoke(main, ["run", "--source", EXAMPLE, "--logging-format=json"])
    assert result.exit_code == 1
    entry = json.loads(result.stderr)
    assert entry["msg"] == "unexpected error: a bug"
    assert "RuntimeError: a bug" in entry["error"]


def test_init_only_sets_the_parameters_and_exits(fake: FakeKernel) -> None:
    args = ["run", "--init-only", "--ipvs-strict-arp", "--ipvs-tcp-timeout", "20m"]
    result = CliRunner().invoke(main, [*args, "--logging-format", "json"])
    assert result.exit_code == 0, result.stderr
    messages = [json.loads(line)["msg"] for line in result.stderr.splitlines()]
    assert "set sysctl net.ipv4.vs.conntrack 0 -> 1" in messages
    assert "set IPVS timeouts tcp 1200s" in messages
    assert messages[-1] == "kernel parameters set; exiting, as --init-only asks"
    assert fake.sysctl.values["net.ipv4.conf.all.arp_ignore"] == "1"
    assert fake.ipvs.timeouts().tcp == 1200
    assert fake.ipvs.dump() == {}


def test_init_only_exits_1_naming_what_the_kernel_refused(fake: FakeKernel) -> None:
    del fake.sysctl.values["net.ipv4.vs.expire_nodest_conn"]
    result = CliRunner().invoke(main, ["run", "--init-only"])
    assert result.exit_code == 1
    assert (
        "kernel refused: set sysctl net.ipv4.vs.expire_nodest_conn (absent) -> 1: "
        "No such file or directory"
    ) in result.stderr
    assert fake.sysctl.values["net.ipv4.ip_forward"] == "1"


def test_shell_completion_as_readme_documents_it() -> None:
    """click's completion: ``_IPVSPROXY_COMPLETE=bash_source ipvsproxy`` prints the script,
    which asks the command itself for each word."""
    source = CliRunner().invoke(
        main, [], env={"_IPVSPROXY_COMPLETE": "bash_source"}, prog_name="ipvsproxy"
    )
    assert "_ipvsproxy_completion()" in source.output
    env = {
        "_IPVSPROXY_COMPLETE": "bash_complete",
        "COMP_WORDS": "ipvsproxy sync --sum",
        "COMP_CWORD": "2",
    }
    completed = CliRunner().invoke(main, [], env=env, prog_name="ipvsproxy")
    assert completed.output.splitlines() == ["plain,--summary"]
