"""The ``ipvsproxy`` command line: click commands and kube-proxy's flag names, nothing more."""

from __future__ import annotations

import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import click

from ipvsproxy import __version__
from ipvsproxy.cluster.source import SourceError, load_snapshot
from ipvsproxy.model import SCHEDULERS
from ipvsproxy.reconcile.plan import owned_addresses, plan_ipvs
from ipvsproxy.render import plan_json, plan_text
from ipvsproxy.translate import Settings, translate

USAGE_EXIT = 2


def _not_implemented(command: str) -> NoReturn:
    _fail(f"{command}: not implemented yet")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ipvsproxy")
def main() -> None:
    """A Kubernetes service proxy that programs the Linux kernel's IPVS load balancer."""


@main.command()
def run() -> None:
    """Run the proxy: watch the cluster and keep the kernel in sync."""
    _not_implemented("run")


def _fail(message: str) -> NoReturn:
    click.echo(f"ipvsproxy: {message}", err=True)
    sys.exit(USAGE_EXIT)


@main.command()
@click.option("--once", is_flag=True, help="Reconcile once and exit.")
@click.option(
    "--source",
    type=click.Path(exists=True, path_type=Path),
    help="Read Services, EndpointSlices and Nodes from manifest files instead of the API.",
)
@click.option(
    "--hostname-override",
    default=lambda: socket.gethostname().lower(),
    show_default="the host name",
    help="The name of this node, as kube-proxy's flag.",
)
@click.option("--ipvs-scheduler", default="rr", show_default=True, help="Default scheduler.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sync(
    *,
    once: bool,
    source: Path | None,
    hostname_override: str,
    ipvs_scheduler: str,
    dry_run: bool,
    output: str,
) -> None:
    """Reconcile the kernel's IPVS state with the cluster."""
    if not once:
        _fail("sync needs --once (the long-running proxy is 'ipvsproxy run')")
    if source is None:
        _fail("reading the cluster from the API server is not implemented yet; use --source PATH")
    if not dry_run:
        _fail("applying a plan to the kernel is not implemented yet; use --dry-run")
    if ipvs_scheduler not in SCHEDULERS:
        _fail(f"--ipvs-scheduler {ipvs_scheduler!r} is not one of {', '.join(sorted(SCHEDULERS))}")
    try:
        snapshot, rejections = load_snapshot(source, hostname_override)
    except SourceError as error:
        _fail(str(error))
    desired = translate(snapshot, Settings(scheduler=ipvs_scheduler))
    desired = replace(desired, rejections=(*rejections, *desired.rejections))
    ops = plan_ipvs(desired, {}, owned_addresses(desired, ())).ops
    if output == "json":
        click.echo(plan_json(ops, desired))
    else:
        click.echo(
            "# dry run against an empty IPVS table: reading the kernel is not implemented yet"
        )
        click.echo(plan_text(ops, desired))


@main.command()
def cleanup() -> None:
    """Remove everything ipvsproxy (or kube-proxy's IPVS mode) created, and nothing else."""
    _not_implemented("cleanup")


@main.command()
def show() -> None:
    """Show the live kernel state in Kubernetes terms."""
    _not_implemented("show")
