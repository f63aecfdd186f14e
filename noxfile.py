"""Sessions: a bare ``nox`` runs lint, typecheck, tests and kernel; e2e and bench on request."""

from __future__ import annotations

import argparse
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "kernel"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install(session: nox.Session, *groups: str) -> None:
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _existing(*paths: str) -> list[str]:
    return [path for path in paths if Path(path).exists()]


@nox.session
def lint(session: nox.Session) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    _install(session, "typecheck")
    session.run("mypy", "--strict", "ipvsproxy")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, contract (on the fakes) and api tiers: no root needed."""
    _install(session, "test")
    paths = _existing("tests/unit", "tests/contract", "tests/api")
    session.run("python", "-m", "pytest", *paths, *session.posargs)


@nox.session
def kernel(session: nox.Session) -> None:
    """The lab tier: contract suites on the real kernel and real traffic, inside User-Mode Linux."""
    _install(session, "test")
    paths = _existing("tests/contract", "tests/kernel")
    session.run("python", "-m", "tests.lab", *paths, *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """The daemon against a fake API server, inside the lab."""
    if not Path("tests/e2e").exists():
        session.error("tests/e2e does not exist yet: the end-to-end scenarios come with the daemon")
    _install(session, "test")
    session.run("python", "-m", "tests.lab", "tests/e2e", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The scale benchmark: bench-results/report.md, report.json and latency.png (git-ignored).

    ``nox -s bench -- --sizes 1000,5000,10000 --changes 100``. Never pass/fail, never run by
    default: the big sizes take many minutes in the lab.
    """
    parser = argparse.ArgumentParser(prog="nox -s bench --")
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--changes", default="100", help="daemon changes of each kind per size")
    args = parser.parse_args(session.posargs)
    _install(session, "bench")
    out = Path("bench-results")
    manifests = out / "manifests"
    host_load = [_uptime()]
    session.run("python", "-m", "bench.cluster", "--sizes", args.sizes, "--out", str(manifests))
    with (out / "control.json").open("w") as control:
        session.run("python", "-m", "bench.control_plane", "--sizes", args.sizes, stdout=control)
    lab = out / "lab.json"
    files = [str(manifests / f"cluster-{int(size)}.json") for size in args.sizes.split(",")]
    session.run(
        "python", "-m", "tests.lab", "--run", "python", "-m", "bench.lab_scale",
        "--out", str(lab), "--changes", args.changes, *files,
    )  # fmt: skip
    host_load.append(_uptime())
    session.run(
        "python", "-m", "bench.report", "--lab", str(lab), "--control", str(out / "control.json"),
        "--host-load", " then ".join(host_load), "--out", str(out),
    )  # fmt: skip
    session.log((out / "report.md").read_text())
    # The batch micro-benchmarks of the kernel layer, beside the report.
    with (out / "batch.txt").open("w") as batch:
        for script in ("bench/ipvs_batch.py", "bench/ipset_batch.py"):
            session.run("python", "-m", "tests.lab", "--run", "python", script, stdout=batch)


def _uptime() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
