"""The ``ipvsproxy`` command line: click commands and kube-proxy's flag names, nothing more."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.core import ParameterSource

from ipvsproxy import __version__, defaults
from ipvsproxy.cluster.source import SourceError, load_snapshot
from ipvsproxy.config import (
    FLAGS_OVER_FILE,
    ConfigError,
    ProxyConfig,
    Resolved,
    reconciler_settings,
    resolve,
)
from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.preconditions import check_schedulers, require_net_admin
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    ClusterSnapshot,
    DesiredState,
    IPAddress,
    IptablesChainDiff,
    IPVSTable,
    ObjectKey,
    Rejection,
    VirtualServerKey,
)
from ipvsproxy.plan_summary import SUMMARY_ABOVE, summarized, summary_text
from ipvsproxy.reconcile.apply import Progress
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.reconcile.state import EMPTY_KERNEL
from ipvsproxy.reconcile.syncplan import SyncPlan, plan_sync
from ipvsproxy.render import (
    LIVE_KERNEL,
    Baseline,
    cleanup_json,
    sync_plan_json,
    sync_plan_text,
    sync_result_json,
    sync_result_text,
    takeover_json,
    takeover_text,
)
from ipvsproxy.translate import translate

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

    from ipvsproxy.owners import Owners

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
    click.option("--ipvs-scheduler",
                 help=f"The default IPVS scheduler [default: {defaults.SCHEDULER}]."),
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
                 help="The packet-mark bit (0-31) that asks for SNAT "
                 f"[default: {defaults.MASQUERADE_BIT}]."),
    click.option("--conntrack-max-per-core", type=int, metavar="N",
                 help="Conntrack entries per CPU core; nf_conntrack_max is raised to this "
                 "times the CPUs, at least --conntrack-min (0 leaves it) [default: 32768]."),
    click.option("--conntrack-min", type=int, metavar="N",
                 help="The least nf_conntrack_max to ask for [default: 131072]."),
    click.option("--conntrack-tcp-timeout-established", metavar="DURATION",
                 help="Conntrack's idle timeout of established TCP connections (0 leaves "
                 "it) [default: 24h]."),
    click.option("--conntrack-tcp-timeout-close-wait", metavar="DURATION",
                 help="Conntrack's timeout of TCP connections in CLOSE_WAIT (0 leaves it) "
                 "[default: 1h]."),
    click.option("--conntrack-tcp-be-liberal", type=click.BOOL, is_flag=False, flag_value=True,
                 help="Set nf_conntrack_tcp_be_liberal to 1."),
    click.option("--conntrack-udp-timeout", metavar="DURATION",
                 help="Conntrack's timeout of unreplied UDP flows (0 leaves it) [default: 0]."),
    click.option("--conntrack-udp-timeout-stream", metavar="DURATION",
                 help="Conntrack's timeout of assured UDP flows (0 leaves it) [default: 0]."),
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


_summary_option = click.option(
    "--summary/--full",
    default=None,
    help="Text output: counts by kind and by namespace and the skipped objects, or every "
    f"operation [default: the summary above {SUMMARY_ABOVE} operations].",
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
@_summary_option
@_proxy_options
def sync(
    ctx: click.Context,
    *,
    once: bool,
    dry_run: bool,
    allow_empty: bool,
    output: str,
    summary: bool | None,
    **_: object,
) -> None:
    """Reconcile the kernel's IPVS state with the cluster.

    Exit 0 when every operation applied, 1 when some failed (each listed), 2 for usage and
    precondition errors.
    """
    if not once:
        _fail("sync needs --once (the long-running proxy is 'ipvsproxy run')")
    _sync_once(ctx, dry_run=dry_run, allow_empty=allow_empty, output=output, summary=summary)


# One pass that exits when done: what it builds stays in use until then, so no collection of
# it finds garbage (at 10,000 services they took 0.7-1.3 s of its 5-6 s of CPU).
@without_cyclic_gc
def _sync_once(
    ctx: click.Context, *, dry_run: bool, allow_empty: bool, output: str, summary: bool | None
) -> None:
    config = _resolve_config(ctx)
    read = _snapshot(ctx.params["source"], config, allow_empty)
    if dry_run:
        _dry_run(read, config, output, summary)
        return
    _check(require_net_admin)
    with ExitStack() as stack:
        kernel = _open_kernel(stack)
        _check(partial(check_schedulers, kernel.ipvs, {config.settings.scheduler}))
        progress = stack.enter_context(_progress_bar())
        desired = _translated(read, config, kernel.addresses.local_addresses(DUMMY_INTERFACE))
        result = Reconciler(kernel, reconciler_settings(config)).sync(desired, progress=progress)
    if output == "json":
        _write(sync_result_json(result, desired))
    else:
        click.echo(_plan_text(result.plan, desired, summary))
        click.echo(sync_result_text(result))
    sys.exit(0 if result.ok else 1)


@contextmanager
def _progress_bar() -> Iterator[Progress | None]:
    """click's progress bar over the IPVS writes, on stderr while it is a terminal; None
    elsewhere (click would still print its label once, into a log or a captured stream)."""
    if not sys.stderr.isatty():
        yield None
        return
    bars: list[ProgressBar[int]] = []

    def shown(done: int, total: int) -> None:
        if not bars:
            bars.append(click.progressbar(length=total, label="programming IPVS", file=sys.stderr))
        bars[0].update(done - bars[0].pos)

    try:
        yield shown
    finally:
        for bar in bars:
            bar.render_finish()


def _write(chunks: Iterable[str], batch: int = 1 << 20) -> None:
    """Text too large to hold whole, written in batches of about ``batch`` characters as it
    is made (chunks range from a token to a whole operation)."""
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= batch:
            sys.stdout.write("".join(pending))
            pending.clear()
            size = 0
    pending.append("\n")
    sys.stdout.write("".join(pending))


def _plan_text(
    plan: SyncPlan,
    desired: DesiredState,
    summary: bool | None,
    iptables_changes: Sequence[IptablesChainDiff] | None = None,
) -> str:
    if not summarized(plan, summary):
        return sync_plan_text(plan, desired, iptables_changes)
    note = "" if summary else f" (over {SUMMARY_ABOVE} operations; --full lists each)"
    return f"# summary{note}\n{summary_text(plan, desired, iptables_changes)}"


def _dry_run(
    read: tuple[ClusterSnapshot, list[Rejection]],
    config: ProxyConfig,
    output: str,
    summary: bool | None,
) -> None:
    """The plan against the kernel's state when it can be read, else against an empty one
    (and then with the Node object's addresses for the node's own)."""
    settings = reconciler_settings(config)
    iptables_changes: tuple[IptablesChainDiff, ...] | None = None
    try:
        require_net_admin()
        with real_kernel() as kernel:
            local = kernel.addresses.local_addresses(DUMMY_INTERFACE)
            desired = _translated(read, config, local)
            plan = Reconciler(kernel, settings).plan(desired)
            if output == "text":
                iptables_changes = tuple(
                    diff for ruleset in plan.iptables for diff in kernel.iptables.diff(ruleset)
                )
        header = "# dry run: the plan against the kernel's current state; nothing is changed"
        baseline = LIVE_KERNEL
    except PreconditionError as error:
        desired = _translated(read, config)
        plan = plan_sync(
            desired,
            EMPTY_KERNEL,
            strict_arp=settings.strict_arp,
            timeouts=settings.ipvs_timeouts,
            conntrack=settings.conntrack,
        )
        header = f"# dry run against an empty kernel state ({error}); nothing is changed"
        baseline = Baseline(live=False, reason=str(error))
    if output == "json":
        _write(sync_plan_json(plan, desired, baseline))
    else:
        click.echo(header)
        click.echo(_plan_text(plan, desired, summary, iptables_changes))


@main.command()
@click.option("--check", is_flag=True, help="Print the plan and the verdict; change nothing.")
@_output_option
@_summary_option
@_proxy_options
def takeover(
    ctx: click.Context, *, check: bool, output: str, summary: bool | None, **_: object
) -> None:
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
    read = _snapshot(ctx.params["source"], config, allow_empty=True)
    _check(require_net_admin)
    with ExitStack() as stack:
        kernel = _open_kernel(stack)
        desired = _translated(read, config, kernel.addresses.local_addresses(DUMMY_INTERFACE))
        reconciler = Reconciler(kernel, reconciler_settings(config))
        actual = reconciler.observe()
        plan = reconciler.plan(desired, actual)
    from ipvsproxy.reconcile.takeover import check_takeover  # noqa: PLC0415

    verdict = check_takeover(plan, actual.ipvs)
    if output == "json":
        _write(takeover_json(plan, desired, verdict))
    else:
        click.echo("# takeover check: ipvsproxy's first sync against this node; nothing is changed")
        click.echo(_plan_text(plan, desired, summary))
        click.echo(takeover_text(verdict))
    sys.exit(0 if verdict.safe else 1)


@main.command()
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@_output_option
def cleanup(*, dry_run: bool, output: str) -> None:
    """Remove everything ipvsproxy (or kube-proxy's IPVS mode) created, and nothing else.

    Exit 0 when everything went (or nothing was there), 1 when something could not be removed
    (or, with --dry-run, read).
    """
    from ipvsproxy.reconcile.cleanup import (  # noqa: PLC0415
        plan_leftovers,
        planned_removals,
        remove_leftovers,
    )

    _check(require_net_admin)
    with real_kernel(ipvs_optional=True) as kernel:
        parts = (kernel.ipvs, kernel.addresses, kernel.ipsets, kernel.iptables)
        if dry_run:
            plan, failed = plan_leftovers(*parts)
            done = planned_removals(plan)
        else:
            report = remove_leftovers(*parts)
            done = tuple(line.removeprefix("removed ") for line in report.removed)
            failed = report.failed
    if output == "json":
        _write(cleanup_json(dry_run, done, failed))
    else:
        verb = "would remove" if dry_run else "removed"
        for what in done:
            click.echo(f"{verb} {what}")
        for line in failed:
            click.echo(f"ipvsproxy: {line}", err=True)
    sys.exit(1 if failed else 0)


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


def _read_ipvs(ipvs: IPVSKernel, only: Collection[VirtualServerKey] | None) -> IPVSTable:
    """The kernel's table, or only the virtual servers ``only`` names (those it has)."""
    if only is None:
        return ipvs.dump()
    found = ((key, ipvs.virtual_server(key)) for key in only)
    return MappingProxyType({key: state for key, state in found if state is not None})


def _cluster_asked(ctx: click.Context) -> bool:
    """Whether the command line names where the cluster is: --source, --kubeconfig, --master."""
    return ctx.params["source"] is not None or any(
        ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
        for name in ("kubeconfig", "master")
    )


def _owners(
    ctx: click.Context, config: ProxyConfig, service: ObjectKey | None
) -> tuple[Owners | None, str]:
    """Who owns each virtual server (or why nobody says): --source, --kubeconfig or --master
    first; then the proxy running here; then the API server (the config file's kubeconfig,
    or in-cluster)."""
    from ipvsproxy.owners import OwnersAnswer, owners_of  # noqa: PLC0415
    from ipvsproxy.show_source import ask_daemon, in_cluster  # noqa: PLC0415

    source: Path | None = ctx.params["source"]
    if _cluster_asked(ctx):
        return owners_of(_desired_state(source, config), service), ""
    answer = ask_daemon(config.metrics_bind_address, service)
    if isinstance(answer, OwnersAnswer):
        if answer.truncated:
            click.echo("ipvsproxy: warning: the proxy sent only part of its table", err=True)
        return answer.owners, ""
    if config.kubeconfig is not None or in_cluster():
        click.echo(f"ipvsproxy: warning: {answer}; reading the cluster instead", err=True)
        return owners_of(_desired_state(None, config), service), ""
    return None, answer


@main.command()
@click.argument("service", required=False, metavar="[NAMESPACE/NAME]")
@_output_option
@_proxy_options
def show(ctx: click.Context, *, service: str | None, output: str, **_: object) -> None:
    """Show the live kernel state in Kubernetes terms.

    Service names come from --source, or from the API server given --kubeconfig or --master;
    else from the proxy running on this node (its translation, asked on its metrics address,
    --config's metricsBindAddress or 127.0.0.1:10249), then from the API server (--config's
    kubeconfig, or in-cluster). With none, the kernel's table alone, without names. With
    NAMESPACE/NAME and the proxy's answer, only that Service's virtual servers are read from
    the kernel.
    """
    only = _service_filter(service)
    config = _resolve_config(ctx)
    if _cluster_asked(ctx):
        _require_node_name(config)
    _check(require_net_admin)
    with ExitStack() as stack:
        ipvs = _open_kernel(stack).ipvs
        owners, why_unnamed = _owners(ctx, config, only)
        keys = owners.keys() if owners is not None and only is not None else None
        table = _read_ipvs(ipvs, keys)
    if owners is None:
        click.echo(f"ipvsproxy: no Service names: {why_unnamed}", err=True)
    from ipvsproxy.show import build_view, view_json, view_text  # noqa: PLC0415

    view = build_view(table, owners, only)
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
                 f"[default: {defaults.bind_text(defaults.HEALTHZ_BIND)}]."),
    click.option("--metrics-bind-address", metavar="HOST:PORT",
                 help="Serve /metrics here; port 0 turns it off "
                 f"[default: {defaults.bind_text(defaults.METRICS_BIND)}]."),
    click.option("--ipvs-sync-period", metavar="DURATION",
                 help="How often the kernel is read whole and repaired "
                 f"[default: {defaults.duration_text(defaults.SYNC_PERIOD_SECONDS)}]."),
    click.option("--ipvs-min-sync-period", metavar="DURATION",
                 help="The least time between two syncs; changes in between coalesce "
                 f"[default: {defaults.duration_text(defaults.MIN_SYNC_PERIOD_SECONDS)}]."),
    click.option("--logging-format", type=click.Choice(["text", "json"]),
                 help="Log lines as text or as JSON objects "
                 f"[default: {defaults.LOGGING_FORMAT}]."),
    click.option("-v", "--v", "verbosity", default="0", metavar="N", callback=_verbosity,
                 help="Log verbosity; 4 and up logs debug detail [default: 0]."),
    click.option("--traffic-metrics/--no-traffic-metrics", default=True,
                 help="Export per-service IPVS traffic counters in /metrics [default: on]."),
    click.option("--init-only", is_flag=True,
                 help="Set the kernel parameters (sysctls, conntrack, IPVS timeouts) and exit, "
                 "as kube-proxy's: for a privileged init container before an unprivileged proxy."),
)  # fmt: skip


def _run_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_RUN_FLAGS):
        command = option(command)
    return _proxy_options(command)


@main.command()
@_run_options
def run(
    ctx: click.Context, *, verbosity: int, traffic_metrics: bool, init_only: bool, **_: object
) -> None:
    """Run the proxy: watch the cluster (or --source) and keep the kernel in sync.

    SIGTERM and SIGINT stop it with exit status 0, leaving the kernel's state in place.
    """
    resolved = _resolve(ctx)
    logging_format = resolved.config.logging_format
    if init_only:
        _run_or_fatal(logging_format, partial(_init_node, resolved, verbosity))
        return
    # Here, not at the top: the daemon brings the kubernetes client and prometheus_client, a
    # second of imports inside the lab that sync --once, show and cleanup never use.
    from ipvsproxy.daemon.errors import DaemonError  # noqa: PLC0415
    from ipvsproxy.daemon.main import serve_daemon  # noqa: PLC0415

    def serve() -> None:
        if resolved.config.hostname_problem:
            raise DaemonError(resolved.config.hostname_problem)
        serve_daemon(
            resolved.config,
            ctx.params["source"],
            verbosity,
            traffic_metrics=traffic_metrics,
            warnings=resolved.warnings,
        )

    _run_or_fatal(logging_format, serve)


def _run_or_fatal(logging_format: str, work: Callable[[], int | None]) -> None:
    """``work``, its exit status kept; a failure that ends it is one line (or one JSON object,
    with --logging-format json), exit 2 for what the daemon names, 1 for anything else."""
    from ipvsproxy.daemon.errors import DaemonError  # noqa: PLC0415
    from ipvsproxy.daemon.logs import fatal_line  # noqa: PLC0415

    try:
        status = work()
    except DaemonError as error:
        click.echo(fatal_line(logging_format, str(error)), err=True)
        sys.exit(USAGE_EXIT)
    except Exception as error:
        if logging_format != "json":
            raise
        click.echo(fatal_line(logging_format, f"unexpected error: {error}", error), err=True)
        sys.exit(1)
    if status:
        sys.exit(status)


def _init_node(resolved: Resolved, verbosity: int) -> int:
    """kube-proxy's --init-only; exit status 1 when the kernel refused a parameter."""
    from ipvsproxy.daemon.init_node import init_node  # noqa: PLC0415

    return init_node(resolved.config, verbosity, resolved.warnings)
