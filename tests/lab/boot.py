"""Boot one User-Mode Linux kernel with this machine's file system as root and run pytest in it.

The kernel runs as an ordinary process. PID 1 is a generated shell script: it mounts what
``ip netns`` and pyroute2 need, loads the IPVS, ipset, netfilter and link modules, runs pytest
with the caller's arguments (its output goes straight to our stdout through the UML console)
and writes pytest's exit status to a file, which is the only exit status that means anything:
the boot's own status does not.

No network device is ever given to the UML kernel: everything the tests send stays inside it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ipvsproxy.model import SCHEDULERS

APT_PACKAGES = (
    "user-mode-linux",
    "kmod",
    "ipvsadm",
    "ipset",
    "iptables",
    "iproute2",
    "conntrack",
    # promtool, which checks the daemon's /metrics
    "prometheus",
)
UML_MODULES_ROOT = Path("/usr/lib/uml/modules")
MODULES = (
    "ip_vs",
    *(f"ip_vs_{scheduler}" for scheduler in sorted(SCHEDULERS)),
    "dummy",
    "veth",
    "nf_conntrack",
    "nf_conntrack_netlink",
    "ip_set",
    "ip_set_hash_ip",
    "ip_set_hash_ipport",
    "ip_set_hash_ipportip",
    "ip_set_hash_ipportnet",
    "ip_set_hash_net",
    "ip_set_bitmap_port",
    "xt_set",
    "xt_comment",
    "xt_mark",
    "xt_addrtype",
    "xt_conntrack",
    "xt_MASQUERADE",
    "xt_ipvs",
    "xt_tcpudp",
    "ipt_REJECT",
    "ip6t_REJECT",
    "iptable_nat",
    "iptable_filter",
    "ip6table_nat",
    "ip6table_filter",
    "ipt_REJECT",
    "ip6t_REJECT",
)
# Tools the tests call inside the lab, beside the kernel itself.
LAB_COMMANDS = ("linux", "modprobe", "ip", "ipvsadm", "ipset", "iptables", "conntrack", "promtool")


def _missing_commands() -> list[str]:
    return [command for command in LAB_COMMANDS if shutil.which(command) is None]


def _install_packages() -> str | None:
    """Install the lab's apt packages when we can; return why the lab cannot run, or None."""
    if not _missing_commands():
        return None
    if os.geteuid() != 0:
        return f"the lab needs {', '.join(_missing_commands())}; run as root to install them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"lab: installing {' '.join(APT_PACKAGES)}", flush=True)
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *APT_PACKAGES]):
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            return f"lab: {' '.join(command[:2])} failed with status {done.returncode}"
    missing = _missing_commands()
    return f"the lab still lacks {', '.join(missing)} after apt-get install" if missing else None


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab boots network namespaces and needs root"
    reason = _install_packages()
    if reason:
        return reason
    if not any(UML_MODULES_ROOT.glob("*/kernel")):
        return f"no User-Mode Linux modules under {UML_MODULES_ROOT}"
    return None


def _init_script(scratch: Path, command_args: list[str], status_file: Path) -> str:
    passed_env = {
        name: value
        for name, value in os.environ.items()
        if name in {"PATH", "HOME", "CI", "LANG", "VIRTUAL_ENV", "PYTHONPATH", "TERM"}
        or name.startswith(("IPVSPROXY_", "PYTEST_", "HYPOTHESIS_"))
    }
    passed_env["IPVSPROXY_LAB"] = "1"
    # pytest's tmp_path lives in the shared /tmp; keep each boot's apart.
    passed_env["PYTEST_DEBUG_TEMPROOT"] = str(scratch / "pytest")
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in passed_env.items())
    modules_root = scratch / "modroot"
    command = shlex.join(command_args)
    return f"""#!/bin/sh
{exports}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm 2>/dev/null
mkdir -p {scratch / "pytest"}
for module in {" ".join(MODULES)}; do
    modprobe -d {modules_root} "$module" || echo "lab: modprobe $module failed"
done
ip link set lo up
cd {shlex.quote(os.getcwd())}
{command}
echo $? > {status_file}
poweroff -f
"""


def run_in_lab(command_args: list[str]) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="ipvsproxy-lab-"))
    try:
        for version_dir in UML_MODULES_ROOT.iterdir():
            link = scratch / "modroot" / "lib" / "modules" / version_dir.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(version_dir)
        status_file = scratch / "status"
        init = scratch / "init.sh"
        init.write_text(_init_script(scratch, command_args, status_file))
        init.chmod(0o755)
        (scratch / "uml").mkdir()
        subprocess.run(
            [
                "linux",
                "mem=1G",
                "root=/dev/root",
                "rootfstype=hostfs",
                "rootflags=/",
                "rw",
                "quiet",
                f"init={init}",
                "con0=null,fd:1",
                "con=null",
            ],
            env={**os.environ, "TMPDIR": str(scratch / "uml")},
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if not status_file.exists():
            print("lab: the UML kernel stopped before its command finished", flush=True)
            return 3
        return int(status_file.read_text().strip() or 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(args: list[str]) -> int:
    """``--run COMMAND...`` runs a command in the lab (the benchmark); anything else is pytest's."""
    reason = unavailable_reason()
    if args[:1] == ["--run"]:
        if reason is not None:
            print(f"lab: unavailable: {reason}", flush=True)
            return 3
        return run_in_lab(args[1:])
    pytest_args = args
    if reason is None:
        return run_in_lab([sys.executable, "-m", "pytest", *pytest_args])
    # Run the lab tests here anyway: their conftest turns this reason into one skip each
    # (a failure under CI=true), so the report says what did not run and why.
    print(f"lab: unavailable: {reason}", flush=True)
    env = {**os.environ, "IPVSPROXY_LAB_UNAVAILABLE": reason}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args], env=env, check=False
    ).returncode
