"""Sessions: a bare ``nox`` runs lint, typecheck, tests, kernel, e2e and differential; lowest,
bench, image on request."""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "kernel", "e2e", "differential"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")
# The lab kernel's memory (tests/lab/boot.py reads it).
MEMORY_VARIABLE = "IPVSPROXY_LAB_MEM"
E2E_LAB_MEMORY = "3G"


def _install(session: nox.Session, *groups: str) -> None:
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _packages(session: nox.Session, *commands: str) -> None:
    """Install, with apt as root, the Debian packages of ``commands`` (COMMAND=PACKAGE) that are
    missing: every session installs what it needs itself, whatever order they run in."""
    session.run("python3", "-m", "tests.packages", *commands, external=True)


def _controlplane(session: nox.Session) -> dict[str, str]:
    """Build (or find in the cache) the real control plane; the environment naming its folder."""
    build = ("python3", "-m", "tests.controlplane.build")
    session.run(*build, external=True)
    last_line = str(session.run(*build, external=True, silent=True)).strip().splitlines()[-1]
    return {"IPVSPROXY_CONTROLPLANE": last_line.removeprefix("controlplane: ")}


def _existing(*paths: str) -> list[str]:
    return [path for path in paths if Path(path).exists()]


@nox.session
def lint(session: nox.Session) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("hadolint", "Containerfile")
    # README's layering, as contracts in pyproject.toml; it reads the package from this tree.
    session.run("lint-imports", env={"PYTHONPATH": str(Path.cwd())})


@nox.session
def typecheck(session: nox.Session) -> None:
    _install(session, "typecheck")
    session.run("mypy", "--strict", "ipvsproxy", "tests")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, contract (on the fakes), api (the real kube-apiserver on loopback) and chart tiers."""
    _packages(session, "promtool=prometheus", "openssl")
    env = _controlplane(session)
    _install(session, "test")
    paths = _existing("tests/unit", "tests/contract", "tests/api", "tests/chart")
    session.run("python", "-m", "pytest", *paths, *session.posargs, env=env)


@nox.session
def dashboard(session: nox.Session) -> None:
    """README's picture of the chart's Grafana dashboard, from a real scrape (about 7 minutes):
    ``nox -s dashboard -- docs/dashboard.png``."""
    _packages(session, "prometheus")
    _install(session, "test", "bench")
    out = session.posargs[0] if session.posargs else "docs/dashboard.png"
    session.run("python", "-m", "tests.chart.dashboard_png", out, *session.posargs[1:])


@nox.session
def lowest(session: nox.Session) -> None:
    """The unit and api tiers on the lowest version of each dependency pyproject.toml allows
    (uv's lowest-direct resolution; what those depend on, at its newest): a floor that no
    longer holds fails here rather than on a user's machine."""
    _packages(session, "promtool=prometheus", "openssl")
    env = _controlplane(session)
    session.install("uv>=0.6.6")
    pinned = Path(session.create_tmp()) / "lowest.txt"
    pinned.unlink(missing_ok=True)  # uv would keep the versions an earlier run chose
    python = ("--python", str(Path(session.bin) / "python"))
    session.run_install(
        "uv", "pip", "compile", "--quiet", "--resolution=lowest-direct", *python,
        "pyproject.toml", "--group=pyproject.toml:test", f"--output-file={pinned}",
    )  # fmt: skip
    session.run_install("uv", "pip", "sync", "--quiet", *python, str(pinned))
    session.run_install("uv", "pip", "install", "--quiet", "--no-deps", *python, "-e", ".")
    session.log(pinned.read_text())
    paths = _existing("tests/unit", "tests/api")
    session.run("python", "-m", "pytest", *paths, *session.posargs, env=env)


@nox.session(venv_backend="none")
def controlplane(session: nox.Session) -> None:
    """kube-apiserver, kube-controller-manager, kube-proxy and etcd, built from their Go modules
    (tests/controlplane/go.mod) and cached; prints ``controlplane: DIR`` last."""
    session.run("python3", "-m", "tests.controlplane.build", external=True)


@nox.session
def kernel(session: nox.Session) -> None:
    """The lab tier: contract suites on the real kernel and real traffic, inside User-Mode Linux."""
    _install(session, "test")
    paths = _existing("tests/contract", "tests/kernel")
    session.run("python", "-m", "tests.lab", *paths, *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """The daemon against the real etcd and kube-apiserver, pods and real traffic, all inside
    the lab; each boot starts its own control plane. The takeover scenario runs the real
    kube-proxy there too."""
    env = _controlplane(session)
    _install(session, "test")
    # Beside the daemon: kube-apiserver (~300 MB), etcd, the kube-controller-manager, and
    # their binaries copied into the lab's tmpfs.
    env[MEMORY_VARIABLE] = os.environ.get(MEMORY_VARIABLE) or E2E_LAB_MEMORY
    session.run("python", "-m", "tests.lab", "tests/e2e", *session.posargs, env=env)


@nox.session
def differential(session: nox.Session) -> None:
    """ipvsproxy and the real kube-proxy --proxy-mode=ipvs side by side on one cluster in the
    lab: the named scenarios and random steps, every difference explained or failing.

    ``nox -s differential -- --steps 2000`` (or IPVSPROXY_DIFFERENTIAL_STEPS) for a longer
    random run; it prints ``differential: N scenarios, M steps, K differences, K explained``.
    """
    env = _controlplane(session)
    _install(session, "test")
    session.run("python", "-m", "tests.differential", *session.posargs, env=env)


@nox.session
def bench(session: nox.Session) -> None:
    """The scale benchmark: bench-results/report.md, report.json and latency.png (git-ignored).

    ``nox -s bench -- --sizes 1000,5000,10000 --changes 100``; with ``--peer kube-proxy
    --runs 3``, ipvsproxy beside the real kube-proxy instead (``bench.peer``: each run a Poisson
    stream of ``--changes`` of each kind at ``--rate`` a second, then a burst of ``--burst`` of
    each). Never pass/fail, never run by default: the big sizes take many minutes in the lab.
    """
    parser = argparse.ArgumentParser(prog="nox -s bench --")
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument(
        "--changes",
        help="changes of each kind per size (100); with --peer, in each run's stream (80)",
    )
    parser.add_argument("--rate", default="4", help="with --peer: the stream's changes a second")
    parser.add_argument("--burst", default="20", help="with --peer: changes of each kind at once")
    parser.add_argument(
        "--peer",
        choices=("kube-proxy",),
        help="measure ipvsproxy beside the real kube-proxy instead (bench.peer)",
    )
    parser.add_argument("--runs", default="3", help="with --peer: runs of each proxy per size")
    parser.add_argument(
        "--kube-proxy-runs", help="with --peer: kube-proxy's runs, when fewer than --runs"
    )
    parser.add_argument(
        "--sync-period",
        default="1h",
        help="the daemon's --ipvs-sync-period (30s: its periodic full syncs in the window)",
    )
    parser.add_argument(
        "--min-sync-period", help="with --peer: both proxies' minSyncPeriod (a labelled row)"
    )
    args = parser.parse_args(session.posargs)
    _install(session, "bench")
    out = Path("bench-results")
    if args.peer:
        options = ("--changes", args.changes or "80", "--rate", args.rate, "--burst", args.burst)
        if args.min_sync_period:
            options = (*options, "--min-sync-period", args.min_sync_period)
        if args.kube_proxy_runs:
            options = (*options, "--kube-proxy-runs", args.kube_proxy_runs)
        _bench_peer(session, args.sizes, options, args.runs, out)
        return
    manifests = out / "manifests"
    host_load = [_uptime()]
    session.run("python", "-m", "bench.cluster", "--sizes", args.sizes, "--out", str(manifests))
    with (out / "control.json").open("w") as control:
        session.run("python", "-m", "bench.control_plane", "--sizes", args.sizes, stdout=control)
    lab = out / "lab.json"
    files = [str(manifests / f"cluster-{int(size)}.json") for size in args.sizes.split(",")]
    # 10,000 services: sync --once, the daemon and the bench's fake API server each hold the
    # cluster, beside the kernel's table; the tests' 1 GB is too tight for them in turn.
    session.run(
        "python", "-m", "tests.lab", "--run", "python", "-m", "bench.lab_scale",
        "--out", str(lab), "--changes", args.changes or "100",
        "--daemon-sync-period", args.sync_period, *files,
        env={"IPVSPROXY_LAB_MEM": os.environ.get("IPVSPROXY_LAB_MEM", "3G")},
    )  # fmt: skip
    host_load.append(_uptime())
    session.run(
        "python", "-m", "bench.report", "--lab", str(lab), "--control", str(out / "control.json"),
        "--host-load", " then ".join(host_load), "--out", str(out),
    )  # fmt: skip
    session.log((out / "report.md").read_text())
    with (out / "command.txt").open("w") as command:
        session.run("python", "bench/command_bench.py", stdout=command)
    # The batch micro-benchmarks of the kernel layer, beside the report.
    with (out / "batch.txt").open("w") as batch:
        for script in ("bench/ipvs_batch.py", "bench/ipset_batch.py"):
            session.run("python", "-m", "tests.lab", "--run", "python", script, stdout=batch)
        # IPVS read-back and conntrack deletes at 5,000 services; it seeds conntrack flows with
        # the lab's test helper, so the repository is importable.
        lab_dump = ("python", "-m", "tests.lab", "--run", "python", "bench/ipvs_dump.py")
        session.run(*lab_dump, stdout=batch, env={"PYTHONPATH": str(Path.cwd())})


def _bench_peer(
    session: nox.Session, sizes: str, options: tuple[str, ...], runs: str, out: Path
) -> None:
    """ipvsproxy and kube-proxy on one lab boot's real API server, one after the other."""
    env = _controlplane(session)
    out.mkdir(exist_ok=True)
    peer = out / "peer.json"
    host_load = [_uptime()]
    session.run(
        "python", "-m", "tests.lab", "--run", "python", "-m", "bench.peer", "--out", str(peer),
        "--sizes", sizes, *options, "--runs", runs,
        env={**env, "IPVSPROXY_LAB_MEM": os.environ.get("IPVSPROXY_LAB_MEM", "3G")},
    )  # fmt: skip
    host_load.append(_uptime())
    session.run(
        "python", "-m", "bench.report", "--peer", str(peer),
        "--host-load", " then ".join(host_load), "--out", str(out),
    )  # fmt: skip
    session.log((out / "report.md").read_text())


def _uptime() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


IMAGE_DIR = Path("build/image")
ROOTFS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ipvsproxy"
# The offline base: Debian with Python and the node tools, nothing else (no apt, no docs).
MMDEBSTRAP_ARGS = (
    "--variant=essential",
    "--include=python3,iproute2,ipset,iptables,kmod,conntrack,usr-is-merged",
    # The essential set brings usrmerge, and with it 55 MB of Perl that nothing else needs once
    # usr-is-merged is there; dpkg refuses (and the build fails) if that ever stops being true.
    '--customize-hook=chroot "$1" dpkg --purge usrmerge libfile-find-rule-perl'
    " libnumber-compare-perl libtext-glob-perl perl perl-modules-5.36 libperl5.36",
    # The mirror's Release files may be older than their Valid-Until; the keyring still checks them.
    "--aptopt=Acquire::Check-Valid-Until false",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "bookworm",
)
MMDEBSTRAP_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
IMAGE_TOOLS = ("mmdebstrap", "podman", "runc")


def _package_version() -> str:
    found = re.search(r'^__version__ = "(.+)"$', Path("ipvsproxy/__init__.py").read_text(), re.M)
    assert found, "ipvsproxy/__init__.py has no __version__"
    return found[1]


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:  # the cache on another file system
        shutil.copyfile(source, target)


def _rootfs(session: nox.Session) -> Path:
    """The offline base's root file system, cached outside the repo by what goes into it."""
    key = hashlib.sha256("\n".join((*MMDEBSTRAP_ARGS, *MMDEBSTRAP_SOURCES)).encode()).hexdigest()
    cached = ROOTFS_CACHE / f"rootfs-{key[:16]}.tar"
    if cached.exists():
        session.log(f"root file system from the cache: {cached}")
        return cached
    ROOTFS_CACHE.mkdir(parents=True, exist_ok=True)
    for stale in ROOTFS_CACHE.glob("rootfs-*.tar"):
        stale.unlink()
    partial = cached.with_suffix(".partial.tar")
    session.run("mmdebstrap", *MMDEBSTRAP_ARGS, str(partial), *MMDEBSTRAP_SOURCES, external=True)
    partial.rename(cached)
    return cached


def _podman_env() -> dict[str, str]:
    """crun refuses this kind of host's cgroup layout; runc with explicit ulimits works."""
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    conf = IMAGE_DIR / "containers.conf"
    conf.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={hard_nofile}:{hard_nofile}", "nproc=4096:4096"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
    )
    return {"CONTAINERS_CONF": str(conf.resolve())}


def _image_id(session: nox.Session, tag: str, env: dict[str, str]) -> str:
    """The image the tag names now, or "" (a rebuild leaves the old one untagged otherwise)."""
    found = session.run("podman", "image", "inspect", "--format={{.Id}}", tag, env=env,
                        external=True, silent=True, success_codes=[0, 125])  # fmt: skip
    return str(found).strip() if found and "Error" not in str(found) else ""


@nox.session
def image(session: nox.Session) -> None:
    """The image, built offline (mmdebstrap + podman), run, and saved as an OCI archive."""
    _packages(session, *IMAGE_TOOLS)
    context = IMAGE_DIR / "context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    session.run("python", "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(context / "wheels"),
                ".", "pip")  # fmt: skip
    _link_or_copy(_rootfs(session), context / "rootfs.tar")
    env = _podman_env()
    tag = f"localhost/ipvsproxy:{_package_version()}"
    previous = _image_id(session, tag, env)
    podman = ("podman", "build", "--network=host", "--file=Containerfile", f"--tag={tag}")
    session.run(*podman, "--build-arg=BASE=rootfs", str(context), env=env, external=True)
    if previous and previous != _image_id(session, tag, env):
        session.run("podman", "rmi", previous, env=env, external=True, success_codes=[0, 1, 2])
    run = ("podman", "run", "--rm", "--network=host")
    session.run(*run, tag, "--version", env=env, external=True)
    examples = Path("examples").resolve()
    session.run(*run, f"--volume={examples}:/examples:ro", tag, "sync", "--once", "--dry-run",
                "--source=/examples/cluster.yaml", "--hostname-override=node-a",
                env=env, external=True)  # fmt: skip
    archive = IMAGE_DIR / f"ipvsproxy-{_package_version()}.oci.tar"
    archive.unlink(missing_ok=True)
    session.run("podman", "save", "--format=oci-archive", f"--output={archive}", tag,
                env=env, external=True)  # fmt: skip
    size = session.run("podman", "image", "inspect", "--format={{.Size}}", tag,
                       env=env, external=True, silent=True)  # fmt: skip
    session.log(f"{tag}: {int(str(size)) / 2**20:.1f} MiB unpacked")
    session.log(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB")
