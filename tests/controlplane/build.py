"""The real control plane's binaries, built from their published Go modules and cached.

``go.mod`` beside this file pins ``k8s.io/kubernetes`` (its staging modules replaced by their
``v0.X.Y`` releases, as that module's own go.mod lists them) and etcd's server at the release
that Kubernetes version requires. Nothing of their source is kept in the repository: the Go
module proxy serves it, ``go build`` makes the binaries, and they are cached by version and by
the digest of what went into them, so only a fresh machine pays the build.

``python -m tests.controlplane.build`` builds (or finds) them and prints, last, one line
``controlplane: DIR``. Tests and nox sessions find the folder through ``located()``: the
``IPVSPROXY_CONTROLPLANE`` variable a session sets, else the cache, never by building.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE_DIR = Path(__file__).resolve().parent
# Binary name -> the main package it is built from.
PACKAGES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
}
# -s -w: no symbol tables (kube-apiserver 170 -> 119 MB); the tests never debug them.
BUILD_FLAGS = ("-trimpath",)
LOCATION_VARIABLE = "IPVSPROXY_CONTROLPLANE"
CACHE_VARIABLE = "IPVSPROXY_CONTROLPLANE_CACHE"
STAMP = "built-from"


def pinned_version(module: str, go_mod: Path = MODULE_DIR / "go.mod") -> str:
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", go_mod.read_text(), re.M)
    if not found:
        raise LookupError(f"{go_mod} does not require {module}")
    return found[1]


def kubernetes_version() -> str:
    return pinned_version("k8s.io/kubernetes")


def etcd_version() -> str:
    return pinned_version("go.etcd.io/etcd/server/v3")


def _ldflags() -> str:
    """No symbol tables, and the version stamped as Kubernetes' own release build stamps it
    (unstamped, every component calls itself v0.0.0-master)."""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = (
        f"{package}.{name}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        )
    )
    return " ".join(("-s", "-w", *(f"-X {stamp}" for stamp in stamps)))


def _inputs_digest() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        digest.update((MODULE_DIR / name).read_bytes())
    digest.update("\0".join((*BUILD_FLAGS, _ldflags())).encode())
    for binary, package in sorted(PACKAGES.items()):
        digest.update(f"{binary}={package}\n".encode())
    return digest.hexdigest()[:12]


def cache_root() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ipvsproxy" / "controlplane"


def cached_dir() -> Path:
    """The folder the pinned binaries live in once built (it may not exist yet)."""
    return cache_root() / f"{kubernetes_version()}-{_inputs_digest()}"


def _complete(folder: Path) -> bool:
    return (folder / STAMP).is_file() and all((folder / name).is_file() for name in PACKAGES)


def located() -> Path | None:
    """The folder holding the four binaries, or None when they have not been built."""
    configured = os.environ.get(LOCATION_VARIABLE)
    if configured:
        return Path(configured) if _complete(Path(configured)) else None
    folder = cached_dir()
    return folder if _complete(folder) else None


def build(log: bool = True) -> Path:
    """Build the binaries unless the cache has them; return their folder."""
    folder = cached_dir()
    if _complete(folder):
        return folder
    if shutil.which("go") is None:
        raise RuntimeError("the control plane is built with Go, and `go` is not on PATH")
    folder.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Built beside the final folder and renamed into it: an interrupted build leaves no
    # folder that looks complete.
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".building-") as scratch:
        output = Path(scratch) / "bin"
        output.mkdir()
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
        for binary, package in PACKAGES.items():
            if log:
                print(f"controlplane: go build {package}", flush=True)
            subprocess.run(
                [
                    "go",
                    "build",
                    *BUILD_FLAGS,
                    f"-ldflags={_ldflags()}",
                    "-o",
                    str(output / binary),
                    package,
                ],
                cwd=MODULE_DIR,
                env=env,
                check=True,
            )
        (output / STAMP).write_text(
            f"k8s.io/kubernetes {kubernetes_version()}\n"
            f"go.etcd.io/etcd/server/v3 {etcd_version()}\n"
            f"built in {time.monotonic() - started:.0f} s\n"
        )
        shutil.rmtree(folder, ignore_errors=True)
        output.rename(folder)
    if log:
        print(f"controlplane: built in {time.monotonic() - started:.0f} s", flush=True)
    return folder


def main() -> int:
    try:
        folder = build()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(f"controlplane: build failed: {error}", file=sys.stderr)
        return 1
    print(f"controlplane: {folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
