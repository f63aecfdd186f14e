"""The proxy's configuration: kube-proxy's KubeProxyConfiguration file merged with its flags.

kube-proxy's rules, kept here (cmd/kube-proxy/app/options.go):

* With ``--config``, the file replaces the flags wholesale; only ``--hostname-override``
  (and logging flags, which we do not have) still win over it. Flags that lose are reported
  as warnings, since kube-proxy drops them silently and that surprises people.
* The file is decoded strictly first and, for v1alpha1, leniently when that fails: an unknown
  field is logged and ignored, not fatal. A wrong apiVersion, kind or value type is fatal.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ipvsproxy import defaults
from ipvsproxy.bounded_load import LoadError, load_documents, read_bounded
from ipvsproxy.cluster.manifest_file import DEFAULT_MAX_FILE_SIZE, MAX_FILE_SIZE_FLAG
from ipvsproxy.cluster.validation import SUBDOMAIN_MAX, is_dns1123_subdomain
from ipvsproxy.model import SCHEDULERS, IPFamily, IPNetwork, IPVSTimeouts
from ipvsproxy.reconcile.parameters import LEAVE_CONNTRACK, ConntrackSettings
from ipvsproxy.reconcile.reconciler import ReconcilerSettings
from ipvsproxy.translate.settings import (
    DEFAULT_NODE_PORT_RANGE,
    KUBELET_PORT,
    LocalDetectMode,
    Settings,
    parse_nodeport_addresses,
    parse_port_range,
)

API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"
KIND = "KubeProxyConfiguration"

# File field -> (flag that sets the same thing, or None; YAML type it must have).
# "duration" is Go's time.Duration text ("30s", "1m30s"); "cidrs" a comma-separated string.
FIELDS: Mapping[str, tuple[str | None, str]] = {
    "hostnameOverride": ("--hostname-override", "str"),
    "clientConnection.kubeconfig": ("--kubeconfig", "str"),
    "mode": (None, "str"),
    "clusterCIDR": ("--cluster-cidr", "str"),
    "detectLocalMode": ("--detect-local-mode", "str"),
    "detectLocal.bridgeInterface": ("--pod-bridge-interface", "str"),
    "detectLocal.interfaceNamePrefix": ("--pod-interface-name-prefix", "str"),
    "nodePortAddresses": ("--nodeport-addresses", "list"),
    "healthzBindAddress": ("--healthz-bind-address", "str"),
    "metricsBindAddress": ("--metrics-bind-address", "str"),
    "iptables.masqueradeAll": ("--masquerade-all", "bool"),
    "iptables.masqueradeBit": ("--iptables-masquerade-bit", "number"),
    "ipvs.scheduler": ("--ipvs-scheduler", "str"),
    "ipvs.excludeCIDRs": ("--ipvs-exclude-cidrs", "list"),
    "ipvs.strictARP": ("--ipvs-strict-arp", "bool"),
    "ipvs.syncPeriod": ("--ipvs-sync-period", "duration"),
    "ipvs.minSyncPeriod": ("--ipvs-min-sync-period", "duration"),
    "logging.format": ("--logging-format", "str"),
    "ipvs.tcpTimeout": ("--ipvs-tcp-timeout", "duration"),
    "ipvs.tcpFinTimeout": ("--ipvs-tcpfin-timeout", "duration"),
    "ipvs.udpTimeout": ("--ipvs-udp-timeout", "duration"),
    "conntrack.maxPerCore": ("--conntrack-max-per-core", "number"),
    "conntrack.min": ("--conntrack-min", "number"),
    "conntrack.tcpEstablishedTimeout": ("--conntrack-tcp-timeout-established", "duration"),
    "conntrack.tcpCloseWaitTimeout": ("--conntrack-tcp-timeout-close-wait", "duration"),
    "conntrack.tcpBeLiberal": ("--conntrack-tcp-be-liberal", "bool"),
    "conntrack.udpTimeout": ("--conntrack-udp-timeout", "duration"),
    "conntrack.udpStreamTimeout": ("--conntrack-udp-timeout-stream", "duration"),
}

# kube-proxy fields that do not apply to an IPVS-only proxy: accepted with any value, ignored.
IGNORED_FIELDS = frozenset(
    {
        "featureGates",
        "clientConnection.acceptContentTypes",
        "clientConnection.contentType",
        "clientConnection.qps",
        "clientConnection.burst",
        "logging.flushFrequency",
        "logging.verbosity",
        "logging.vmodule",
        "logging.options",
        "bindAddress",
        "bindAddressHardFail",
        "enableProfiling",
        "showHiddenMetricsForVersion",
        "iptables.localhostNodePorts",
        "iptables.snatNodeInternalIP",
        "iptables.syncPeriod",
        "iptables.minSyncPeriod",
        "nftables",
        "winkernel",
        "oomScoreAdj",
        "configSyncPeriod",
        "portRange",
        "windowsRunAsService",
    }
)

MASQUERADE_BIT_MAX = 31
# A KubeProxyConfiguration is a few kilobytes, and a ConfigMap holds at most 1 MiB.
MAX_CONFIG_FILE_BYTES = 1 << 20

# Flags that win over the file, as in kube-proxy. Every other flag loses to --config.
FLAGS_OVER_FILE = frozenset({"--hostname-override"})
# Our flags beyond kube-proxy's: the file has no field for them, so they apply with --config.
EXTERNAL_IP_RANGE_FLAG = "--service-external-ip-range"
NODE_PORT_RANGE_FLAG = "--service-node-port-range"
API_TIMEOUT_FLAG = "--api-timeout"
DEFAULT_API_TIMEOUT = 60.0

DEFAULTS: Mapping[str, Any] = {
    "ipvs.scheduler": defaults.SCHEDULER,
    "ipvs.syncPeriod": defaults.duration_text(defaults.SYNC_PERIOD_SECONDS),
    "ipvs.minSyncPeriod": defaults.duration_text(defaults.MIN_SYNC_PERIOD_SECONDS),
    "ipvs.tcpTimeout": "0s",
    "ipvs.tcpFinTimeout": "0s",
    "ipvs.udpTimeout": "0s",
    "iptables.masqueradeBit": defaults.MASQUERADE_BIT,
    "healthzBindAddress": defaults.bind_text(defaults.HEALTHZ_BIND),
    "metricsBindAddress": defaults.bind_text(defaults.METRICS_BIND),
    "detectLocalMode": Settings().detect_local_mode.value,
    "logging.format": defaults.LOGGING_FORMAT,
    # kube-proxy's v1alpha1 defaults: a node it ran on already has these.
    "conntrack.maxPerCore": 32 * 1024,
    "conntrack.min": 128 * 1024,
    "conntrack.tcpEstablishedTimeout": "24h",
    "conntrack.tcpCloseWaitTimeout": "1h",
    "conntrack.udpTimeout": "0s",
    "conntrack.udpStreamTimeout": "0s",
}
LOGGING_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class DurationBound:
    """The longest a duration may be: as Go writes it, and why, for the error message."""

    text: str
    why: str = ""

    @property
    def seconds(self) -> float:
        return parse_duration(self.text)


# Long enough for any use we can think of, short enough that no timer or deadline overflows.
LONGEST = DurationBound("24h")
# The kernel keeps IPVS timeouts in jiffies in an int and refuses more than INT_MAX / HZ
# seconds: 2147483 s at the highest HZ (1000). Beyond, every sync would fail (and beyond
# 2^32 s, not even be sent).
LONGEST_IPVS_TIMEOUT = DurationBound("596h31m23s", " (2147483 s, the kernel's limit)")
DURATION_BOUNDS: Mapping[str, DurationBound] = {
    "ipvs.syncPeriod": LONGEST,
    "ipvs.minSyncPeriod": LONGEST,
    "ipvs.tcpTimeout": LONGEST_IPVS_TIMEOUT,
    "ipvs.tcpFinTimeout": LONGEST_IPVS_TIMEOUT,
    "ipvs.udpTimeout": LONGEST_IPVS_TIMEOUT,
    # Conntrack's timeouts are jiffies in an int too.
    "conntrack.tcpEstablishedTimeout": LONGEST_IPVS_TIMEOUT,
    "conntrack.tcpCloseWaitTimeout": LONGEST_IPVS_TIMEOUT,
    "conntrack.udpTimeout": LONGEST_IPVS_TIMEOUT,
    "conntrack.udpStreamTimeout": LONGEST_IPVS_TIMEOUT,
}
# kube-proxy caps maxPerCore times the CPUs here, against excessive memory on big machines.
CONNTRACK_MAX_CAP = 1 << 20
INT32_MAX = (1 << 31) - 1

_STRUCTS = frozenset(path.rsplit(".", 1)[0] for path in (*FIELDS, *IGNORED_FIELDS) if "." in path)
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
# Kubernetes quantity suffixes, as in "64Mi".
_SIZE = re.compile(r"(\d+)(Ki|Mi|Gi|k|M|G)?")
_UNIT_BYTES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(Exception):
    """The configuration cannot be used; the message names the flag or field, in one line."""


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Everything the commands need from flags and file, typed and validated."""

    settings: Settings
    hostname: str
    # Why the host name, taken for want of --hostname-override and $NODE_NAME, is no node
    # name: a command that reads the cluster refuses it; one that does not never needs it.
    hostname_problem: str = ""
    kubeconfig: Path | None = None
    master: str = ""
    sync_period: float = defaults.SYNC_PERIOD_SECONDS
    min_sync_period: float = defaults.MIN_SYNC_PERIOD_SECONDS
    # IPVS connection timeouts to set; 0 leaves the kernel's own (as kube-proxy).
    ipvs_timeouts: IPVSTimeouts = field(default_factory=IPVSTimeouts)
    conntrack: ConntrackSettings = LEAVE_CONNTRACK
    healthz_bind_address: str = defaults.bind_text(defaults.HEALTHZ_BIND)
    metrics_bind_address: str = defaults.bind_text(defaults.METRICS_BIND)
    logging_format: str = defaults.LOGGING_FORMAT
    # The longest a one-shot read of the cluster may take, however the API server trickles.
    api_timeout: float = DEFAULT_API_TIMEOUT
    # The largest --source file read, in bytes.
    source_max_file_size: int = DEFAULT_MAX_FILE_SIZE


@dataclass(frozen=True, slots=True)
class Resolved:
    config: ProxyConfig
    warnings: tuple[str, ...] = ()


def parse_duration(text: str) -> float:
    """Go's time.Duration syntax, as metav1.Duration reads it; seconds."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    parts = _DURATION.findall(body)
    if not parts or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(text)
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def parse_bind_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::]:PORT`` for IPv6) as kube-proxy's bind-address flags take it."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    host = host.removeprefix("[").removesuffix("]")
    if host:
        ipaddress.ip_address(host)
    return host or "0.0.0.0", int(port)


def parse_size(text: str) -> int:
    """A byte count, plain or with a Kubernetes quantity suffix (``64Mi``, ``500k``)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(text)
    return int(match[1]) * _UNIT_BYTES[match[2] or ""]


def _network(text: str) -> IPNetwork:
    # kube-proxy accepts host bits set (Go's net.ParseCIDR), so strict=False.
    if "/" not in text:
        raise ValueError(text)
    return ipaddress.ip_network(text, strict=False)


def parse_cidrs(values: str | list[str], label: str) -> tuple[IPNetwork, ...]:
    items = values.split(",") if isinstance(values, str) else values
    networks: list[IPNetwork] = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        try:
            networks.append(_network(text))
        except ValueError:
            raise ConfigError(f"{label} {text}: not a CIDR") from None
    return tuple(networks)


def _cluster_cidrs(value: str, label: str) -> tuple[IPNetwork, ...]:
    cidrs = parse_cidrs(value, label)
    if len(cidrs) > len(IPFamily) or len({IPFamily.of(c) for c in cidrs}) != len(cidrs):
        raise ConfigError(f"{label} {value}: at most one CIDR per IP family (a dual-stack pair)")
    return cidrs


def _nodeport_addresses(values: list[str], label: str) -> tuple[tuple[IPNetwork, ...], bool]:
    """(CIDRs, primary); "all" is kube-proxy's IPVS default, which no filter means."""
    texts = [v.strip() for v in values if v.strip()]
    if texts == ["all"]:
        return (), False
    try:
        return parse_nodeport_addresses(texts)
    except ValueError as error:
        raise ConfigError(f"{label} {','.join(values)}: {error}") from None


def _check_type(path: str, value: Any, kind: str, label: str) -> Any:
    expected: dict[str, type] = {
        "str": str,
        "duration": str,
        "bool": bool,
        "list": list,
        "number": int,
    }
    # YAML's true is a Python int too; a bit number is not a bool.
    if not isinstance(value, expected[kind]) or (kind == "number" and isinstance(value, bool)):
        raise ConfigError(f"{label}: {path} must be a {kind}, not {value!r}")
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{label}: {path} must be a list of strings, not {value!r}")
    return value


def read_config_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The fields of a KubeProxyConfiguration file we use, by dotted path, and warnings."""
    label = f"--config {path}"
    try:
        data, _ = read_bounded(path, MAX_CONFIG_FILE_BYTES, "for a config file")
        documents = load_documents(data.decode("utf-8")).documents
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{label}: {getattr(error, 'strerror', None) or error}") from None
    except LoadError as error:
        raise ConfigError(f"{label}: {error}") from None
    document = documents[0] if len(documents) == 1 else None
    if not isinstance(document, dict):
        raise ConfigError(f"{label}: not a {KIND} object")
    if document.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"{label}: apiVersion {document.get('apiVersion')!r} is not {API_VERSION}"
        )
    if document.get("kind") != KIND:
        raise ConfigError(f"{label}: kind {document.get('kind')!r} is not {KIND}")
    values: dict[str, Any] = {}
    warnings: list[str] = []
    _collect(document, "", values, warnings, label)
    return values, warnings


def _collect(
    mapping: dict[Any, Any], prefix: str, values: dict[str, Any], warnings: list[str], label: str
) -> None:
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if not prefix and key in ("apiVersion", "kind"):
            continue
        if path in IGNORED_FIELDS or value is None:
            continue
        if path in FIELDS:
            values[path] = _check_type(path, value, FIELDS[path][1], label)
        elif path in _STRUCTS:
            if not isinstance(value, dict):
                raise ConfigError(f"{label}: {path} must be an object, not {value!r}")
            _collect(value, f"{path}.", values, warnings, label)
        else:
            warnings.append(f"{label}: unknown field {path!r} ignored, as kube-proxy does")


def _flag_values(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Command-line values keyed by file field; comma lists split as pflag's StringSlice does."""
    values: dict[str, Any] = {}
    for path, (flag, kind) in FIELDS.items():
        if flag is None or flags.get(flag) is None:
            continue
        value = flags[flag]
        values[path] = [v for v in value.split(",") if v] if kind == "list" else value
    return values


def resolve(
    flags: Mapping[str, Any],
    explicit: Collection[str],
    config_file: Path | None = None,
    master: str = "",
    over_file: Collection[str] = FLAGS_OVER_FILE,
) -> Resolved:
    """Merge flags (by flag name, e.g. ``"--cluster-cidr"``) with the file as kube-proxy does.

    ``explicit`` names the flags given on the command line (not defaulted); of those, only
    ``over_file`` win over the file.
    """
    given = _flag_values({flag: flags.get(flag) for flag in explicit})
    from_file: dict[str, Any] = {}
    warnings: list[str] = []
    if config_file is not None:
        from_file, warnings = read_config_file(config_file)
        for path in sorted(given):
            flag = FIELDS[path][0]
            if flag not in over_file:
                del given[path]
                warnings.append(f"{flag} is ignored because --config is given, as kube-proxy does")
    values = {**from_file, **given}
    origin = {
        path: f"--config {config_file}: {path}"
        if path in from_file and path not in given
        else FIELDS[path][0] or path
        for path in FIELDS
    }
    # As kube-proxy's defaulting: an empty value in the file means the default.
    merged = {**DEFAULTS, **values}
    merged.update({path: DEFAULTS[path] for path in DEFAULTS if merged[path] == ""})
    return Resolved(_with_own_flags(_build(merged, origin, master), flags), tuple(warnings))


def bounded_duration(text: str, label: str, longest: DurationBound) -> float:
    """``text`` as seconds, refused unless a duration from 0 to ``longest``."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise ConfigError(f"{label} {text!r}: not a duration") from None
    if seconds < 0:
        raise ConfigError(f"{label} {text!r}: a duration may not be negative")
    if seconds > longest.seconds:
        raise ConfigError(f"{label} {text!r}: at most {longest.text}{longest.why}")
    return seconds


def _with_own_flags(config: ProxyConfig, flags: Mapping[str, Any]) -> ProxyConfig:
    ranges = flags.get(EXTERNAL_IP_RANGE_FLAG) or ()
    timeout_text = flags.get(API_TIMEOUT_FLAG)
    timeout = DEFAULT_API_TIMEOUT
    if timeout_text is not None:
        if timeout_text.startswith("-"):
            raise ConfigError(f"{API_TIMEOUT_FLAG} {timeout_text!r}: must be positive")
        timeout = bounded_duration(timeout_text, API_TIMEOUT_FLAG, LONGEST)
        if timeout == 0:
            raise ConfigError(f"{API_TIMEOUT_FLAG} {timeout_text!r}: must be positive")
    node_port_range = DEFAULT_NODE_PORT_RANGE
    range_text = flags.get(NODE_PORT_RANGE_FLAG)
    if range_text is not None:
        try:
            node_port_range = parse_port_range(range_text)
        except ValueError as error:
            raise ConfigError(f"{NODE_PORT_RANGE_FLAG} {range_text!r}: {error}") from None
    settings = replace(
        config.settings,
        external_ip_ranges=parse_cidrs(
            ",".join([ranges] if isinstance(ranges, str) else ranges), EXTERNAL_IP_RANGE_FLAG
        ),
        node_port_range=node_port_range,
    )
    return replace(
        config,
        settings=settings,
        api_timeout=timeout,
        source_max_file_size=_source_max_file_size(flags.get(MAX_FILE_SIZE_FLAG)),
    )


def _source_max_file_size(text: str | None) -> int:
    if text is None:
        return DEFAULT_MAX_FILE_SIZE
    try:
        size = parse_size(text)
    except ValueError:
        raise ConfigError(
            f"{MAX_FILE_SIZE_FLAG} {text!r}: not a size (bytes, or with a suffix: 64Mi, 500k)"
        ) from None
    if size <= 0:
        raise ConfigError(f"{MAX_FILE_SIZE_FLAG} {text!r}: must be positive")
    return size


def _node_name(values: Mapping[str, Any], origin: Mapping[str, str]) -> tuple[str, str]:
    """This node's name, as kube-proxy finds it: --hostname-override (or the file's), else
    $NODE_NAME, else the host name; trimmed and lower-cased. It names the Node to read and
    appears in plans and logs, so anything but a Node name (a newline, say) is refused: at
    once when given, or, for the host name, as ``hostname_problem`` (second)."""
    raw: str = values.get("hostnameOverride", "")
    where = origin["hostnameOverride"]
    if not raw:
        raw = os.environ.get("NODE_NAME", "")
        raw, where = (raw, "$NODE_NAME") if raw.strip() else ("", "")
    if raw:
        problem = _node_name_problem(raw, where)
        if problem:
            raise ConfigError(problem)
        return raw.strip().lower(), ""
    host = socket.gethostname()
    return host.strip().lower(), _node_name_problem(host, "the host name")


def _node_name_problem(raw: str, where: str) -> str:
    name = raw.strip().lower()
    if not name:
        return f"{where} {raw!r}: an empty name is invalid"
    if is_dns1123_subdomain(name):
        return ""
    shown = repr(raw) if len(raw) <= SUBDOMAIN_MAX else f"{raw[:SUBDOMAIN_MAX]!r}..."
    return (
        f"{where} {shown}: not a node name (a DNS-1123 subdomain: at most "
        f"{SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.')"
    )


def _own_ports(values: Mapping[str, Any], origin: Mapping[str, str]) -> frozenset[int]:
    """The ports this node serves itself, which no node port may take: the kubelet's, and
    our health and metrics servers' (a bind address that is not HOST:PORT is refused)."""
    ports = {KUBELET_PORT}
    for path in ("healthzBindAddress", "metricsBindAddress"):
        try:
            ports.add(parse_bind_address(values[path])[1])
        except ValueError as error:
            raise ConfigError(f"{origin[path]}: {error}") from None
    return frozenset(ports - {0})


def _interface_for_mode(
    values: Mapping[str, Any], origin: Mapping[str, str], detect: LocalDetectMode
) -> None:
    """kube-proxy's validation: the interface modes are useless without their interface."""
    needed = {
        LocalDetectMode.BRIDGE_INTERFACE: "detectLocal.bridgeInterface",
        LocalDetectMode.INTERFACE_NAME_PREFIX: "detectLocal.interfaceNamePrefix",
    }.get(detect)
    if needed is not None and not values.get(needed):
        from_file = origin["detectLocalMode"].startswith("--config")
        wanted = needed if from_file else FIELDS[needed][0]
        raise ConfigError(f"{origin['detectLocalMode']} {detect.value} needs {wanted}")


def reconciler_settings(config: ProxyConfig) -> ReconcilerSettings:
    """What every sync needs from the configuration beyond translate's settings."""
    return ReconcilerSettings(
        strict_arp=config.settings.strict_arp,
        ipvs_timeouts=config.ipvs_timeouts,
        conntrack=config.conntrack,
    )


def _durations(
    values: Mapping[str, Any], origin: Mapping[str, str], paths: tuple[str, ...]
) -> dict[str, float]:
    """The duration fields at ``paths`` in seconds; each must be within its bounds."""
    return {
        path: bounded_duration(values[path], origin[path], DURATION_BOUNDS[path]) for path in paths
    }


def _ipvs_timeouts(values: Mapping[str, Any], origin: Mapping[str, str]) -> IPVSTimeouts:
    """Whole seconds, as kube-proxy hands them to the kernel; negative ones are refused."""
    seconds = _durations(
        values, origin, ("ipvs.tcpTimeout", "ipvs.tcpFinTimeout", "ipvs.udpTimeout")
    )
    return IPVSTimeouts(
        tcp=int(seconds["ipvs.tcpTimeout"]),
        tcp_fin=int(seconds["ipvs.tcpFinTimeout"]),
        udp=int(seconds["ipvs.udpTimeout"]),
    )


def node_cpus() -> int:
    """The node's CPUs, not this process's share: nf_conntrack_max is the whole node's."""
    return os.cpu_count() or 1


def _count(values: Mapping[str, Any], origin: Mapping[str, str], path: str) -> int:
    value: int = values[path]
    if not 0 <= value <= INT32_MAX:
        raise ConfigError(f"{origin[path]} {value}: must be within the range [0, {INT32_MAX}]")
    return value


def _conntrack(
    values: Mapping[str, Any], origin: Mapping[str, str], cpus: int
) -> ConntrackSettings:
    """kube-proxy's conntrack settings as the kernel takes them (pkg/proxy/conntrack)."""
    per_core = _count(values, origin, "conntrack.maxPerCore")
    floor = _count(values, origin, "conntrack.min")
    seconds = _durations(
        values,
        origin,
        (
            "conntrack.tcpEstablishedTimeout",
            "conntrack.tcpCloseWaitTimeout",
            "conntrack.udpTimeout",
            "conntrack.udpStreamTimeout",
        ),
    )
    # maxPerCore 0 leaves the limit as it is, and min with it.
    maximum = min(CONNTRACK_MAX_CAP, max(per_core * cpus, floor)) if per_core else 0
    return ConntrackSettings(
        max=maximum,
        tcp_established=int(seconds["conntrack.tcpEstablishedTimeout"]),
        tcp_close_wait=int(seconds["conntrack.tcpCloseWaitTimeout"]),
        tcp_be_liberal=bool(values.get("conntrack.tcpBeLiberal", False)),
        udp=int(seconds["conntrack.udpTimeout"]),
        udp_stream=int(seconds["conntrack.udpStreamTimeout"]),
    )


def _build(values: Mapping[str, Any], origin: Mapping[str, str], master: str) -> ProxyConfig:
    mode = values.get("mode", "")
    if mode not in ("", "ipvs"):
        raise ConfigError(f"{origin['mode']} {mode!r}: ipvsproxy only implements the ipvs mode")
    try:
        detect = LocalDetectMode(values["detectLocalMode"])
    except ValueError:
        known = ", ".join(mode.value for mode in LocalDetectMode)
        raise ConfigError(
            f"{origin['detectLocalMode']} {values['detectLocalMode']!r} is not one of {known}"
        ) from None
    _interface_for_mode(values, origin, detect)
    scheduler = values["ipvs.scheduler"]
    if scheduler not in SCHEDULERS:
        known = ", ".join(sorted(SCHEDULERS))
        raise ConfigError(f"{origin['ipvs.scheduler']} {scheduler!r} is not one of {known}")
    periods = _durations(values, origin, ("ipvs.syncPeriod", "ipvs.minSyncPeriod"))
    # As kube-proxy's defaulting: a zero sync period means the default; a zero minimum stays.
    periods["ipvs.syncPeriod"] = periods["ipvs.syncPeriod"] or defaults.SYNC_PERIOD_SECONDS
    if periods["ipvs.minSyncPeriod"] > periods["ipvs.syncPeriod"]:
        raise ConfigError(
            f"{origin['ipvs.minSyncPeriod']} {values['ipvs.minSyncPeriod']!r}: longer than "
            f"{origin['ipvs.syncPeriod']} {values['ipvs.syncPeriod']!r}, as kube-proxy refuses"
        )
    logging_format = values["logging.format"]
    if logging_format not in LOGGING_FORMATS:
        known = ", ".join(LOGGING_FORMATS)
        raise ConfigError(f"{origin['logging.format']} {logging_format!r} is not one of {known}")
    masquerade_bit = values["iptables.masqueradeBit"]
    if not 0 <= masquerade_bit <= MASQUERADE_BIT_MAX:
        raise ConfigError(
            f"{origin['iptables.masqueradeBit']} {masquerade_bit}: "
            f"must be within the range [0, {MASQUERADE_BIT_MAX}]"
        )
    hostname, hostname_problem = _node_name(values, origin)
    kubeconfig = values.get("clientConnection.kubeconfig")
    nodeport_addresses, nodeport_primary = _nodeport_addresses(
        values.get("nodePortAddresses", []), origin["nodePortAddresses"]
    )
    settings = Settings(
        scheduler=scheduler,
        nodeport_addresses=nodeport_addresses,
        nodeport_primary=nodeport_primary,
        detect_local_mode=detect,
        bridge_interface=values.get("detectLocal.bridgeInterface", ""),
        interface_name_prefix=values.get("detectLocal.interfaceNamePrefix", ""),
        masquerade_all=bool(values.get("iptables.masqueradeAll", False)),
        masquerade_bit=masquerade_bit,
        cluster_cidr=_cluster_cidrs(values.get("clusterCIDR", ""), origin["clusterCIDR"]),
        exclude_cidrs=parse_cidrs(values.get("ipvs.excludeCIDRs", []), origin["ipvs.excludeCIDRs"]),
        strict_arp=bool(values.get("ipvs.strictARP", False)),
        own_ports=_own_ports(values, origin),
    )
    return ProxyConfig(
        settings=settings,
        hostname=hostname,
        hostname_problem=hostname_problem,
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
        master=master,
        sync_period=periods["ipvs.syncPeriod"],
        min_sync_period=periods["ipvs.minSyncPeriod"],
        ipvs_timeouts=_ipvs_timeouts(values, origin),
        conntrack=_conntrack(values, origin, node_cpus()),
        healthz_bind_address=values["healthzBindAddress"],
        metrics_bind_address=values["metricsBindAddress"],
        logging_format=logging_format,
    )
