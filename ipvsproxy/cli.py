"""The ``ipvsproxy`` command line: click commands and kube-proxy's flag names, nothing more."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from ipvsproxy import __version__
from ipvsproxy.cluster.source import SourceError, load_snapshot
from ipvsproxy.config import (
    FLAGS_OVER_FILE,
    ConfigError,
    ProxyConfig,
    Resolved,
    reconciler_settings,
    resolve,
)
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.preconditions import check_schedulers, require_net_admin
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    ClusterSnapshot,
    DesiredState,
    IPAddress,
    IPVSTable,
    ObjectKey,
    Rejection,
)
from ipvsproxy.reconcile.cleanup import remove_leftovers
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.reconcile.state import EMPTY_KERNEL
from ipvsproxy.reconcile.syncplan import plan_sync
from ipvsproxy.reconcile.takeover import check_takeover
from ipvsproxy.render import (
    LIVE_KERNEL,
    Baseline,
    sync_plan_json,
    sync_plan_text,
    sync_result_json,
    sync_result_text,
    takeover_json,
    takeover_text,
)
from ipvsproxy.show import build_view, view_json, view_text
from ipvsproxy.translate import translate

USAGE_EXIT = 2


class _OneLineErrors(click.Group):
    """click's own usage errors, in one line like ours, rather than usage text plus error."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.exceptions.NoArgsIsHelpError as error:
            click.echo(error.format_message(), err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            click.echo(f"ipvsproxy: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            sys.exit(1)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ipvsproxy")
def main() -> None:
    """A Kubernetes service proxy that programs the Linux kernel's IPVS load balancer."""


def _fail(message: str) -> NoReturn:
    click.echo(f"ipvsproxy: {message}", err=True)
    sys.exit(USAGE_EXIT)


_PROXY_FLAGS = (
    click.option("--config", "config_file", type=click.Path(path_type=Path), metavar="FILE",
                 help="A KubeProxyConfiguration file; it replaces the flags below, as in "
                 "kube-proxy, except --hostname-override."),
    click.option("--kubeconfig", help="Path to a kubeconfig file with authorization information."),
    click.option("--master", default="", help="The API server address (overrides the kubeconfig)."),
    click.option("--hostname-override", help="The name of this node [default: the host name]."),
    click.option(
        "--source",
        type=click.Path(exists=True, path_type=Path),
        help="Read Services, EndpointSlices and Nodes from manifest files instead of the API.",
    ),
    click.option("--ipvs-scheduler", help="The default IPVS scheduler [default: rr]."),
    click.option("--ipvs-strict-arp", type=click.BOOL, is_flag=False, flag_value=True,
                 help="Set arp_ignore=1 and arp_announce=2."),
    click.option("--ipvs-exclude-cidrs", metavar="CIDRS",
                 help="Comma-separated CIDRs whose virtual servers are never touched."),
    click.option("--ipvs-tcp-timeout", metavar="DURATION",
                 help="Idle timeout of IPVS TCP connections, e.g. 900s [default: 0, the "
                 "kernel's own]."),
    click.option("--ipvs-tcpfin-timeout", metavar="DURATION",
                 help="Timeout of IPVS TCP connections after a FIN [default: 0, the "
                 "kernel's own]."),
    click.option("--ipvs-udp-timeout", metavar="DURATION",
                 help="Timeout of IPVS UDP flows [default: 0, the kernel's own]."),
    click.option("--masquerade-all", type=click.BOOL, is_flag=False, flag_value=True,
                 help="SNAT all traffic sent to Service cluster IPs."),
    click.option("--iptables-masquerade-bit", type=int, metavar="BIT",
                 help="The packet-mark bit (0-31) that asks for SNAT [default: 14]."),
    click.option("--cluster-cidr", metavar="CIDRS",
                 help="The pods' CIDR, or a comma-separated dual-stack pair."),
    click.option("--nodeport-addresses", metavar="CIDRS",
                 help="Comma-separated CIDRs of the node addresses that serve NodePorts, "
                 "or 'primary'."),
    click.option("--detect-local-mode", metavar="MODE",
                 help="How pod traffic is told apart: ClusterCIDR, NodeCIDR, BridgeInterface "
                 "or InterfaceNamePrefix [default: ClusterCIDR]."),
    click.option("--pod-bridge-interface", metavar="NAME",
                 help="The pods' bridge, for --detect-local-mode=BridgeInterface."),
    click.option("--pod-interface-name-prefix", metavar="PREFIX",
                 help="The pods' interface prefix, for --detect-local-mode=InterfaceNamePrefix."),
    click.option("--service-external-ip-range", metavar="CIDRS", multiple=True,
                 help="Accept externalIPs only inside these CIDRs (repeatable, or comma-"
                 "separated); others are ignored with a warning [default: any]."),
    click.option("--service-node-port-range", metavar="LOW-HIGH",
                 help="Serve nodePorts and healthCheckNodePorts only inside this range, as "
                 "kube-apiserver's flag of that name allocates them [default: 30000-32767]."),
    click.option("--api-timeout", metavar="DURATION",
                 help="The longest a one-shot read of the cluster from the API server may "
                 "take, however slowly it answers [default: 60s]."),
    click.option("--source-max-file-size", metavar="SIZE",
                 help="The largest --source file read, in bytes or with a suffix (Ki, Mi, "
                 "Gi, k, M, G); a larger one is refused [default: 64Mi]."),
)  # fmt: skip


def _proxy_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_PROXY_FLAGS):
        command = option(command)
    return click.pass_context(command)


def _resolve_config(
    ctx: click.Context, over_file: Collection[str] = FLAGS_OVER_FILE
) -> ProxyConfig:
    """The config file and kube-proxy's flags, merged; warnings on stderr, errors exit 2."""
    resolved = _resolve(ctx, over_file)
    for warning in resolved.warnings:
        click.echo(f"ipvsproxy: warning: {warning}", err=True)
    return resolved.config


def _resolve(ctx: click.Context, over_file: Collection[str] = FLAGS_OVER_FILE) -> Resolved:
    flags = {f"--{name.replace('_', '-')}": value for name, value in ctx.params.items()}
    explicit = [
        flag
        for flag, name in zip(flags, ctx.params, strict=True)
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]
    try:
        return resolve(flags, explicit, ctx.params["config_file"], ctx.params["master"], over_file)
    except ConfigError as error:
        _fail(str(error))


def _require_node_name(config: ProxyConfig) -> None:
    """Exit 2 in one line when the node's name, needed now, is the host name and no node name
    (a command that reads no cluster never needs it)."""
    if config.hostname_problem:
        _fail(config.hostname_problem)


def _snapshot(
    source: Path | None, config: ProxyConfig, allow_empty: bool
) -> tuple[ClusterSnapshot, list[Rejection]]:
    """The cluster from --source, else from the API server (--kubeconfig, --master)."""
    _require_node_name(config)
    if source is not None:
        try:
            return load_snapshot(
                source,
                config.hostname,
                allow_empty=allow_empty,
                max_file_size=config.source_max_file_size,
            )
        except SourceError as error:
            _fail(str(error))
    # Imported here: the kubernetes client takes most of the CLI's start-up time, and a
    # command reading --source never needs it.
    from ipvsproxy.cluster.api import read_cluster  # noqa: PLC0415
    from ipvsproxy.cluster.connection import ApiError, connect  # noqa: PLC0415
    from ipvsproxy.cluster.deadline import deadline  # noqa: PLC0415

    try:
        with (
            connect(config.kubeconfig, config.master or None) as api,
            deadline(config.api_timeout, f"reading the cluster from the API server at {api.host}"),
        ):
            read = read_cluster(
                api, config.hostname, service_proxy_name=config.settings.service_proxy_name
            )
            return read.snapshot, read.rejections
    except ApiError as error:
        _fail(str(error))


def _translated(
    read: tuple[ClusterSnapshot, list[Rejection]],
    config: ProxyConfig,
    local_addresses: frozenset[IPAddress] | None = None,
) -> DesiredState:
    """The desired state; ``local_addresses``: the node's interfaces', where the kernel was read."""
    snapshot, rejections = read
    desired = translate(replace(snapshot, local_addresses=local_addresses), config.settings)
    return replace(desired, rejections=(*rejections, *desired.rejections))


def _desired_state(
    source: Path | None, config: ProxyConfig, allow_empty: bool = True
) -> DesiredState:
    return _translated(_snapshot(source, config, allow_empty), config)


_output_option = click.option(
    "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)


@main.command()
@click.option("--once", is_flag=True, help="Reconcile once and exit.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Accept a --source without any Service (which removes every virtual server).",
)
@_output_option
@_proxy_options
def sync(
    ctx: click.Context, *, once: bool, dry_run: bool, allow_empty: bool, output: str, **_: object
) -> None:
    """Reconcile the kernel's IPVS state with the cluster.

    Exit 0 when every operation applied, 1 when some failed (each listed), 2 for usage and
    precondition errors.
    """
    if not once:
        _fail("sync needs --once (the long-running proxy is 'ipvsproxy run')")
    config = _resolve_config(ctx)
    read = _snapshot(ctx.params["source"], config, allow_empty)
    if dry_run:
        _dry_run(read, config, output)
        return
    _check(require_net_admin)
    with ExitStack() as stack:
        kernel = _open_kernel(stack)
        _check(partial(check_schedulers, kernel.ipvs, {config.settings.scheduler}))
        desired = _translated(read, config, kernel.addresses.local_addresses(DUMMY_INTERFACE))
        result = Reconciler(kernel, reconciler_settings(config)).sync(desired)
    if output == "json":
        _write(sync_result_json(result, desired))
    else:
        click.echo(sync_plan_text(result.plan, desired))
        click.echo(sync_result_text(result))
    sys.exit(0 if result.ok else 1)


def _write(chunks: Iterable[str], batch: int = 65536) -> None:
    """Text too large to hold whole, written in batches as it is made."""
    pending: list[str] = []
    for chunk in chunks:
        pending.append(chunk)
        if len(pending) >= batch:
            sys.stdout.write("".join(pending))
            pending.clear()
    pending.append("\n")
    sys.stdout.write("".join(pending))


def _dry_run(
    read: tuple[ClusterSnapshot, list[Rejection]], config: ProxyConfig, output: str
) -> None:
    """The plan against the kernel's state when it can be read, else against an empty one
    (and then with the Node object's addresses for the node's own)."""
    settings = reconciler_settings(config)
    try:
        require_net_admin()
        with real_kernel() as kernel:
            local = kernel.addresses.local_addresses(DUMMY_INTERFACE)
            desired = _translated(read, config, local)
            plan = Reconciler(kernel, settings).plan(desired)
        header = "# dry run: the plan against the kernel's current state; nothing is changed"
        baseline = LIVE_KERNEL
    except PreconditionError as error:
        desired = _translated(read, config)
        plan = plan_sync(
            desired,
            EMPTY_KERNEL,
            strict_arp=settings.strict_arp,
            timeouts=settings.ipvs_timeouts,
        )
        header = f"# dry run against an empty kernel state ({error}); nothing is changed"
        baseline = Baseline(live=False, reason=str(error))
    if output == "json":
        _write(sync_plan_json(plan, desired, baseline))
    else:
        click.echo(header)
        click.echo(sync_plan_text(plan, desired))


@main.command()
@click.option("--check", is_flag=True, help="Print the plan and the verdict; change nothing.")
@_output_option
@_proxy_options
def takeover(ctx: click.Context, *, check: bool, output: str, **_: object) -> None:
    """Tell what taking this node over from kube-proxy's IPVS mode would change.

    Plans the first sync 'ipvsproxy run' would make here, against the live kernel that
    kube-proxy programmed, and prints it as 'sync --dry-run' does, then the verdict. Give it
    kube-proxy's own file (--config); --kubeconfig wins over the file's, so an operator's
    kubeconfig can read the cluster. Exit 0 when no virtual server that carries traffic
    would be deleted or re-created, 1 when one would (each listed), 2 for usage and
    precondition errors.
    """
    if not check:
        _fail("takeover needs --check (the takeover itself is 'ipvsproxy run', which adopts "
              "what it finds)")  # fmt: skip
    config = _resolve_config(ctx, FLAGS_OVER_FILE | {"--kubeconfig"})
    desired = _desired_state(ctx.params["source"], config)
    _check(require_net_admin)
    with ExitStack() as stack:
        reconciler = Reconciler(_open_kernel(stack), reconciler_settings(config))
        actual = reconciler.observe()
        plan = reconciler.plan(desired, actual)
    verdict = check_takeover(plan, actual.ipvs)
    if output == "json":
        _write(takeover_json(plan, desired, verdict))
    else:
        click.echo("# takeover check: ipvsproxy's first sync against this node; nothing is changed")
        click.echo(sync_plan_text(plan, desired))
        click.echo(takeover_text(verdict))
    sys.exit(0 if verdict.safe else 1)


@main.command()
def cleanup() -> None:
    """Remove everything ipvsproxy (or kube-proxy's IPVS mode) created, and nothing else.

    Exit 0 when everything went (or nothing was there), 1 when something could not be removed.
    """
    _check(require_net_admin)
    with real_kernel(ipvs_optional=True) as kernel:
        report = remove_leftovers(kernel.ipvs, kernel.addresses, kernel.ipsets, kernel.iptables)
    for line in report.removed:
        click.echo(line)
    for line in report.failed:
        click.echo(f"ipvsproxy: {line}", err=True)
    sys.exit(1 if report.failed else 0)


def _check(precondition: Callable[[], None]) -> None:
    try:
        precondition()
    except PreconditionError as error:
        _fail(str(error))


def _open_kernel(stack: ExitStack) -> Kernel:
    """The machine's kernel, closed with ``stack``; exit 2 when it has no IPVS."""
    try:
        return stack.enter_context(real_kernel())
    except PreconditionError as error:
        _fail(str(error))


def _service_filter(text: str | None) -> ObjectKey | None:
    if text is None:
        return None
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        _fail(f"{text!r} is not NAMESPACE/NAME")
    return ObjectKey(namespace, name)


def _kernel_ipvs_table() -> IPVSTable:
    _check(require_net_admin)
    with ExitStack() as stack:
        return _open_kernel(stack).ipvs.dump()


@main.command()
@click.argument("service", required=False, metavar="[NAMESPACE/NAME]")
@_output_option
@_proxy_options
def show(ctx: click.Context, *, service: str | None, output: str, **_: object) -> None:
    """Show the live kernel state in Kubernetes terms.

    Service names come from --source or from the API server (--kubeconfig, --master); with
    neither, the kernel's table alone, without names.
    """
    only = _service_filter(service)
    config = _resolve_config(ctx)
    source: Path | None = ctx.params["source"]
    named = source is not None or config.kubeconfig is not None or bool(config.master)
    desired = _desired_state(source, config) if named else None
    view = build_view(_kernel_ipvs_table(), desired, only)
    click.echo(view_json(view) if output == "json" else view_text(view))


def _verbosity(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """klog's -v: ``-v 2``, ``-v2``, ``--v=2`` and ``-v=2`` alike."""
    text = value.removeprefix("=")
    if not text.isdigit():
        raise click.BadParameter(f"{value!r} is not a verbosity level (0, 1, 2, ...)", ctx, param)
    return int(text)


_RUN_FLAGS = (
    click.option("--healthz-bind-address", metavar="HOST:PORT",
                 help="Serve /healthz and /livez here; port 0 turns them off "
                 "[default: 0.0.0.0:10256]."),
    click.option("--metrics-bind-address", metavar="HOST:PORT",
                 help="Serve /metrics here; port 0 turns it off [default: 127.0.0.1:10249]."),
    click.option("--ipvs-sync-period", metavar="DURATION",
                 help="How often the kernel is read whole and repaired [default: 30s]."),
    click.option("--ipvs-min-sync-period", metavar="DURATION",
                 help="The least time between two syncs; changes in between coalesce "
                 "[default: 1s]."),
    click.option("--logging-format", type=click.Choice(["text", "json"]),
                 help="Log lines as text or as JSON objects [default: text]."),
    click.option("-v", "--v", "verbosity", default="0", metavar="N", callback=_verbosity,
                 help="Log verbosity; 4 and up logs debug detail [default: 0]."),
    click.option("--traffic-metrics/--no-traffic-metrics", default=True,
                 help="Export per-service IPVS traffic counters in /metrics [default: on]."),
)  # fmt: skip


def _run_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_RUN_FLAGS):
        command = option(command)
    return _proxy_options(command)


@main.command()
@_run_options
def run(ctx: click.Context, *, verbosity: int, traffic_metrics: bool, **_: object) -> None:
    """Run the proxy: watch the cluster (or --source) and keep the kernel in sync.

    SIGTERM and SIGINT stop it with exit status 0, leaving the kernel's state in place.
    """
    # Here, not at the top: the daemon brings the kubernetes client and prometheus_client, a
    # second of imports inside the lab that sync --once, show and cleanup never use.
    from ipvsproxy.daemon.main import DaemonError, serve_daemon  # noqa: PLC0415

    resolved = _resolve(ctx)
    _require_node_name(resolved.config)
    try:
        serve_daemon(
            resolved.config,
            ctx.params["source"],
            verbosity,
            traffic_metrics=traffic_metrics,
            warnings=resolved.warnings,
        )
    except DaemonError as error:
        _fail(str(error))
