"""The ``ipvsproxy`` command line: click commands and kube-proxy's flag names, nothing more."""

from __future__ import annotations

import sys

import click

from ipvsproxy import __version__

NOT_IMPLEMENTED_EXIT = 2


def _not_implemented(command: str) -> None:
    click.echo(f"ipvsproxy {command}: not implemented yet", err=True)
    sys.exit(NOT_IMPLEMENTED_EXIT)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ipvsproxy")
def main() -> None:
    """A Kubernetes service proxy that programs the Linux kernel's IPVS load balancer."""


@main.command()
def run() -> None:
    """Run the proxy: watch the cluster and keep the kernel in sync."""
    _not_implemented("run")


@main.command()
@click.option("--once", is_flag=True, help="Reconcile once and exit.")
def sync(once: bool) -> None:
    """Reconcile the kernel's IPVS state with the cluster."""
    _not_implemented("sync")


@main.command()
def cleanup() -> None:
    """Remove everything ipvsproxy (or kube-proxy's IPVS mode) created, and nothing else."""
    _not_implemented("cleanup")


@main.command()
def show() -> None:
    """Show the live kernel state in Kubernetes terms."""
    _not_implemented("show")
