"""The persistent half of the compile cache: one file per key in a user-private directory.

An entry is ``MAGIC``, one JSON header line (the key it was stored under, the
payload's length and sha256, the compile seconds it saves) and the payload the
backend's serializer wrote. Writes go to a temp file in the same directory and
are renamed over the entry (``os.replace``), so a reader sees a whole entry or
none, and two writers of one key leave one of their entries, whole.

Payloads may be pickles, which run code on load; so an entry is read only
from a directory owned by this user and closed to others (created 0700), only
when the file itself is this user's, a regular file, not writable by group or
others, and only after its key, length and checksum matched. Anything else is
ignored with a :class:`CacheWarning` and the graph is compiled again: never a
crash, never a wrong graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

__all__ = ["SUFFIX", "CacheWarning", "clear", "info", "load", "store"]

MAGIC = b"AOTFX-CACHE 1\n"
SUFFIX = ".aotc"


class CacheWarning(UserWarning):
    """A persistent cache entry or directory was not used; the graph is compiled instead."""


def _warn(message: str) -> None:
    warnings.warn(f"aotfx cache: {message}", CacheWarning, stacklevel=3)


def _owned_by_me(info: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or info.st_uid == os.getuid()


def _private_root(directory: str | os.PathLike[str]) -> Path | None:
    """The cache directory, created 0700 if missing; ``None`` (with a warning) if others could write it."""
    root = Path(directory).expanduser()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=False)
        root.chmod(0o700)  # mkdir's mode is filtered by the umask
    except FileExistsError:
        pass
    except OSError as error:
        _warn(f"cannot create {root}: {error}")
        return None
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode):
        _warn(f"{root} is not a directory; persistent cache off")
        return None
    if not _owned_by_me(info) or info.st_mode & 0o022:
        _warn(f"{root} is owned by another user or writable by group/others; persistent cache off")
        return None
    return root


def _path(root: Path, key: str) -> Path:
    if len(key) != 64 or any(ch not in "0123456789abcdef" for ch in key):
        raise ValueError(f"not a cache key: {key!r}")
    return root / f"{key}{SUFFIX}"


def store(directory: str | os.PathLike[str], key: str, payload: bytes, seconds: float) -> bool:
    """Write the entry for ``key`` atomically; ``True`` when it was written."""
    root = _private_root(directory)
    if root is None:
        return False
    header = {"key": key, "length": len(payload), "sha256": hashlib.sha256(payload).hexdigest(), "seconds": seconds}
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{key[:16]}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(MAGIC + json.dumps(header).encode() + b"\n" + payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, _path(root, key))
    except OSError as error:
        _warn(f"cannot write entry {key[:12]}: {error}")
        Path(tmp).unlink(missing_ok=True)
        return False
    return True


def _read_verified(path: Path, key: str) -> tuple[bytes, float]:
    """The payload and saved seconds of the entry at ``path``; ``ValueError`` saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise ValueError(f"cannot open ({error.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if not _owned_by_me(info):
            raise ValueError("owned by another user")
        if info.st_mode & 0o022:
            raise ValueError("writable by group or others")
        data = file.read()
    if not data.startswith(MAGIC):
        raise ValueError("not an aotfx cache entry")
    header_line, newline, payload = data[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(header_line) if newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise ValueError("header unreadable (truncated?)")
    if header.get("key") != key:
        raise ValueError("stored under another key")
    if header.get("length") != len(payload):
        raise ValueError(f"truncated: {len(payload)} of {header.get('length')} bytes")
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise ValueError("checksum mismatch (corrupted)")
    seconds = header.get("seconds")
    return payload, float(seconds) if isinstance(seconds, int | float) else 0.0


def load(directory: str | os.PathLike[str], key: str) -> tuple[bytes, float] | None:
    """The verified payload stored under ``key`` and the compile seconds it saves, or ``None``.

    A missing entry is a silent miss; an unsafe or damaged one warns.
    """
    root = _private_root(directory)
    if root is None:
        return None
    path = _path(root, key)
    if not os.path.lexists(path):
        return None
    try:
        return _read_verified(path, key)
    except ValueError as why:
        _warn(f"ignoring entry {path.name}: {why}; compiling again")
        return None


def info(directory: str | os.PathLike[str]) -> tuple[int, int]:
    """``(entries, bytes)`` stored in ``directory``."""
    root = Path(directory).expanduser()
    files = list(root.glob(f"*{SUFFIX}")) if root.is_dir() else []
    return len(files), sum(file.stat().st_size for file in files)


def clear(directory: str | os.PathLike[str]) -> int:
    """Remove every entry (and stale temp file) from ``directory``; how many entries went."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        return 0
    for tmp in root.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    files = list(root.glob(f"*{SUFFIX}"))
    for file in files:
        file.unlink(missing_ok=True)
    return len(files)
