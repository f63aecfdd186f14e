"""Sessions: a bare ``nox`` runs lint, typecheck, tests, kernel and e2e; bench on request."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "kernel", "e2e"]
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
    """The daemon against a fake API server, pods and real traffic, inside the lab."""
    _install(session, "test")
    session.run("python", "-m", "tests.lab", "tests/e2e", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Scale figures, written to bench-report.txt: never pass/fail, never run by default."""
    _install(session)
    report = Path("bench-report.txt")
    with report.open("w") as out:
        out.write("# parse + translate, CPU time (this machine)\n")
        out.flush()
        session.run("python", "bench/translate_bench.py", stdout=out)
        out.write("\n# the whole command on a large manifest (this machine)\n")
        out.flush()
        session.run("python", "bench/command_bench.py", stdout=out)
        out.write(
            "\n# IPVS and ipset writes inside the lab (ratios count; UML's absolute times do not)\n"
        )
        out.flush()
        for script in ("bench/ipvs_batch.py", "bench/ipset_batch.py"):
            session.run("python", "-m", "tests.lab", "--run", "python", script, stdout=out)
    session.log(report.read_text())
