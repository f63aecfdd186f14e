"""Which manifest files a ``--source`` path holds, by stat alone (nothing is opened).

A folder is walked without following symbolic links to folders (as ``rglob`` did); names that
start with a dot are skipped at every level, and so are files without a manifest suffix. A
file or folder that vanishes between being listed and being looked at was removed while we
looked: it is left out, not an error. Anything else that stops a folder being listed (EMFILE,
EACCES) fails the whole scan, since leaving that folder out would delete its services.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ipvsproxy.bounded_load import not_regular

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# What changes when a file is written, replaced or renamed into place.
Stamp = tuple[int, int, int, int]


class ScanError(Exception):
    """The path cannot be listed; the message is one line and names it."""


def stamp_of(status: os.stat_result) -> Stamp:
    return (status.st_dev, status.st_ino, status.st_mtime_ns, status.st_size)


def path_order(path: str) -> list[str]:
    """Sorts paths as ``Path`` objects sort (by their parts), without making any: a folder of
    10,000 files is scanned every poll, and ``Path`` cost five times the ``stat`` calls."""
    return path.split(os.sep)


@dataclass(slots=True)
class Scan:
    """Paths as strings, each the root's string joined with the names below it."""

    # Regular manifest files (symbolic links followed) and their stat.
    files: dict[str, os.stat_result] = field(default_factory=dict)
    # Entries with a manifest's name that are not regular files, and why they are not read.
    not_read: dict[str, str] = field(default_factory=dict)


def _cannot_read(path: Path | str, error: OSError) -> ScanError:
    return ScanError(f"{path}: cannot read: {error.strerror or error}")


def scan(root: Path) -> Scan:
    """The manifest files under ``root``, or ``root`` itself if it is a file; raises
    ScanError when ``root`` is missing, not a regular file or folder, or cannot be listed."""
    try:
        status = root.stat()
    except FileNotFoundError:
        raise ScanError(f"{root}: no such file or folder") from None
    except OSError as error:
        raise _cannot_read(root, error) from None
    found = Scan()
    if stat.S_ISDIR(status.st_mode):
        _walk(root, found)
    elif (refusal := not_regular(status.st_mode)) is not None:
        raise ScanError(f"{root}: {refusal}")
    else:
        found.files[str(root)] = status
    return found


def _walk(root: Path, found: Scan) -> None:
    folders = [str(root)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.name.endswith(MANIFEST_SUFFIXES):
                        _add(entry, found)
        except (FileNotFoundError, NotADirectoryError):
            if folder == str(root):
                raise ScanError(f"{root}: no such file or folder") from None
        except OSError as error:
            raise _cannot_read(folder, error) from None


def _add(entry: os.DirEntry[str], found: Scan) -> None:
    try:
        status = entry.stat()
    except FileNotFoundError:  # removed since listed, or a link to nothing
        return
    except OSError as error:  # a link loop, say: never a manifest
        found.not_read[entry.path] = f"cannot read: {error.strerror or error}"
        return
    refusal = not_regular(status.st_mode)
    if refusal is None:
        found.files[entry.path] = status
    else:
        found.not_read[entry.path] = refusal
