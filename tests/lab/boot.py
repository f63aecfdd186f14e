"""Boot User-Mode Linux kernels with this machine's file system as root and run pytest in them.

A kernel runs as an ordinary process on one CPU, so there is one boot per CPU, each running its
share of the tests (``shard.py``) in a kernel of its own; their statuses merge into one. PID 1
is a generated shell script: it mounts what ``ip netns`` and pyroute2 need, loads the IPVS,
ipset, netfilter and link modules, points the kernel's module loader (kernel.modprobe) at the
lab's modules so that the kernel and iptables load any other on demand, as on a node, runs
pytest with the caller's arguments (its output comes back through the UML console) and writes
pytest's exit status to a file, which is the only exit status that means anything: the boot's
own status does not.

No network device is ever given to the UML kernel: everything the tests send stays inside it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ipvsproxy.model import SCHEDULERS
from tests import packages

# Tools the tests call inside the lab, beside the kernel itself, and their Debian packages.
LAB_COMMANDS = {
    "linux": "user-mode-linux",
    "modprobe": "kmod",
    "ip": "iproute2",
    "ipvsadm": "ipvsadm",
    "ipset": "ipset",
    "iptables": "iptables",
    "conntrack": "conntrack",
    # checks the daemon's /metrics
    "promtool": "prometheus",
}
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
    "iptable_mangle",
    "ip6table_nat",
    "ip6table_filter",
    "ip6table_mangle",
)
BOOTS_VARIABLE = "IPVSPROXY_LAB_BOOTS"
# Which share of the tests a boot runs ("index/boots"), read by the shard plugin inside.
SHARD_VARIABLE = "IPVSPROXY_LAB_SHARD"
# The lab kernel's memory; the scale benchmark's 10,000-service cluster needs more than tests do.
MEMORY_VARIABLE = "IPVSPROXY_LAB_MEM"
NO_TESTS_COLLECTED = 5
# UML maps the guest's memory into each host process that runs a guest process, page by page:
# a guest process past ~250 MB resident (sync --once at 10,000 services) passes the host's
# default of 65,530 maps per process, and UML kills it ("ran out of memory on the host side").
MAP_COUNT_FILE = Path("/proc/sys/vm/max_map_count")
LAB_MAP_COUNT = 1_048_576
# UML keeps the guest's memory in a file it makes in TMPDIR. On a disk file system the host
# writes the pages the guest dirties back to disk and faults on them again: the lab's
# kube-apiserver took 71 s to start with that file on /tmp against 21 s on /dev/shm (one boot
# each, one after the other). So a tmpfs, when one has room to spare for all of the memory.
HOST_TMPFS = Path("/dev/shm")
MOUNTS = Path("/proc/self/mounts")
MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}
# The lab's host name: a Node's name, a lease's label, never the kernel's "(none)".
HOSTNAME = "ipvsproxy-lab"


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab boots network namespaces and needs root"
    reason = packages.ensure(LAB_COMMANDS)
    if reason:
        return f"the lab's packages: {reason}"
    if not any(UML_MODULES_ROOT.glob("*/kernel")):
        return f"no User-Mode Linux modules under {UML_MODULES_ROOT}"
    return None


def ensure_map_count(setting: Path = MAP_COUNT_FILE, wanted: int = LAB_MAP_COUNT) -> None:
    """Raise the host's per-process map limit to ``wanted`` if it is lower (root only)."""
    try:
        if int(setting.read_text()) >= wanted:
            return
        setting.write_text(f"{wanted}\n")
    except OSError as error:
        print(f"lab: could not raise {setting} to {wanted} ({error}); big guest processes may die")


def memory_bytes(setting: str) -> int:
    """UML's ``mem=`` (``1G``, ``512M``, a number of bytes) in bytes."""
    unit = MEMORY_UNITS.get(setting[-1:].upper())
    return int(setting[:-1]) * unit if unit else int(setting)


def _is_tmpfs(folder: Path, mounts: Path) -> bool:
    return any(
        fields[1:3] == [str(folder), "tmpfs"]
        for fields in (line.split() for line in mounts.read_text().splitlines())
    )


def memory_folder(
    scratch: Path, memory: str, tmpfs: Path = HOST_TMPFS, mounts: Path = MOUNTS
) -> Path:
    """A fresh folder for UML's memory file: on ``tmpfs`` when it is one (as ``mounts`` lists
    them) with twice the lab's memory free (other boots and users need it too), else in
    ``scratch``."""
    if _is_tmpfs(tmpfs, mounts) and shutil.disk_usage(tmpfs).free >= 2 * memory_bytes(memory):
        return Path(tempfile.mkdtemp(prefix="ipvsproxy-lab-memory-", dir=tmpfs))
    folder = scratch / "uml"
    folder.mkdir()
    return folder


def _init_script(
    scratch: Path,
    command_args: list[str],
    status_file: Path,
    lab_env: Mapping[str, str],
) -> str:
    passed_env = {
        name: value
        for name, value in os.environ.items()
        if name in {"PATH", "HOME", "CI", "LANG", "VIRTUAL_ENV", "PYTHONPATH", "TERM"}
        or name.startswith(("IPVSPROXY_", "PYTEST_", "HYPOTHESIS_"))
    }
    passed_env["IPVSPROXY_LAB"] = "1"
    passed_env.update(lab_env)
    # pytest's tmp_path lives in the shared /tmp; keep each boot's apart.
    passed_env["PYTEST_DEBUG_TEMPROOT"] = str(scratch / "pytest")
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in passed_env.items())
    modules_root = scratch / "modroot"
    loader = scratch / "modprobe"
    command = shlex.join(command_args)
    return f"""#!/bin/sh
{exports}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm 2>/dev/null
echo {HOSTNAME} > /proc/sys/kernel/hostname
mkdir -p {scratch / "pytest"}
for module in {" ".join(MODULES)}; do
    modprobe -d {modules_root} "$module" || echo "lab: modprobe $module failed"
done
printf '#!/bin/sh\nexec %s -d %s "$@"\n' "$(command -v modprobe)" {modules_root} > {loader}
chmod +x {loader}
echo {loader} > /proc/sys/kernel/modprobe
ip link set lo up
cd {shlex.quote(os.getcwd())}
{command}
echo $? > {status_file}
poweroff -f
"""


def run_in_lab(
    command_args: list[str],
    console: IO[bytes] | None = None,
    lab_env: Mapping[str, str] | None = None,
) -> int:
    """Boot one lab kernel, run ``command_args`` in it with ``lab_env`` added to its environment
    and return their exit status. The console goes to ``console`` (default: our stdout)."""
    ensure_map_count()
    scratch = Path(tempfile.mkdtemp(prefix="ipvsproxy-lab-"))
    memory = os.environ.get(MEMORY_VARIABLE) or "1G"
    uml_temp = memory_folder(scratch, memory)
    try:
        for version_dir in UML_MODULES_ROOT.iterdir():
            link = scratch / "modroot" / "lib" / "modules" / version_dir.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(version_dir)
        status_file = scratch / "status"
        init = scratch / "init.sh"
        init.write_text(_init_script(scratch, command_args, status_file, lab_env or {}))
        init.chmod(0o755)
        subprocess.run(
            [
                "linux",
                f"mem={memory}",
                "root=/dev/root",
                "rootfstype=hostfs",
                "rootflags=/",
                "rw",
                "quiet",
                f"init={init}",
                "con0=null,fd:1",
                "con=null",
            ],
            env={**os.environ, "TMPDIR": str(uml_temp)},
            stdin=subprocess.DEVNULL,
            stdout=console,
            check=False,
        )
        if not status_file.exists():
            print("lab: the UML kernel stopped before its command finished", flush=True)
            return 3
        return int(status_file.read_text().strip() or 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(uml_temp, ignore_errors=True)


def boot_count() -> int:
    """One boot per CPU (a lab kernel uses one), or IPVSPROXY_LAB_BOOTS."""
    return max(1, int(os.environ.get(BOOTS_VARIABLE) or os.cpu_count() or 1))


def merged_status(statuses: list[int]) -> int:
    """pytest's status over all boots; a boot whose share was empty (5) counts for nothing."""
    failed = [status for status in statuses if status not in (0, NO_TESTS_COLLECTED)]
    if failed:
        return max(failed)
    return 0 if 0 in statuses else NO_TESTS_COLLECTED


def run_pytest_in_labs(pytest_args: list[str], boots: int) -> int:
    """Each boot runs its share of the tests (``shard.py``). The first boot's console streams
    here as it runs; each other one is printed whole once that boot is done."""
    command = [sys.executable, "-m", "pytest", "-p", "tests.lab.shard", *pytest_args]
    with tempfile.TemporaryDirectory(prefix="ipvsproxy-lab-consoles-") as folder:
        consoles = [Path(folder) / f"boot{index}" for index in range(boots)]

        def boot(index: int) -> int:
            share = {SHARD_VARIABLE: f"{index}/{boots}"}
            if index == 0:
                return run_in_lab(command, lab_env=share)
            with consoles[index].open("wb") as console:
                return run_in_lab(command, console, share)

        with ThreadPoolExecutor(boots) as pool:
            statuses = list(pool.map(boot, range(boots)))
        for index in range(1, boots):
            print(f"lab: boot {index + 1} of {boots}", flush=True)
            sys.stdout.buffer.write(consoles[index].read_bytes())
            sys.stdout.buffer.flush()
    print(f"lab: {boots} boots, pytest exit statuses {statuses}", flush=True)
    return merged_status(statuses)


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
        return run_pytest_in_labs(pytest_args, boot_count())
    # Run the lab tests here anyway: their conftest turns this reason into one skip each
    # (a failure under CI=true), so the report says what did not run and why.
    print(f"lab: unavailable: {reason}", flush=True)
    env = {**os.environ, "IPVSPROXY_LAB_UNAVAILABLE": reason}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args], env=env, check=False
    ).returncode
