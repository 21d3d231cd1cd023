"""The disk limit of a run (``limits.disk_gb``): what the agent can write.

The agent writes to two folders, ``workspace`` and ``output``; its stdout and stderr
reach ``logs/`` only through the framework, which caps each (``limits.log_mb``, see
:class:`spu.sandbox.process.CappedLog`), so a full disk never stops the framework from
logging why the run ended.

Under root, where loop devices work, the two folders live on a file system of their
own: a sparse image file in the run folder (it takes on the host only what is written,
and never more than the limit), formatted ext4 and loop-mounted at
``<run_dir>/.spu-disk-<pid>``, with its ``workspace`` and ``output`` bound over the
run's folders. An agent that fills it gets ``ENOSPC`` from the kernel and the
run is stopped as ``disk_limit``; nothing beyond the limit reaches the host's disk.
When the agent is done the files are copied back into the run folder (links, FIFOs and
sockets as such, never followed; no extended attributes) and the image is deleted.

Whatever the agent leaves is disarmed before the host sees it (:func:`disarm`, under
every mechanism): device nodes are removed, setuid and setgid bits and file
capabilities stripped, so that a container agent running as root cannot leave a
root shell or a raw disk for the host's users.

Elsewhere (not root, no loop device, no ``mkfs.ext4``) the sizes of the two folders
are sampled every few seconds and the agent is stopped when they pass the limit
(``polled``): a fast writer can overshoot between two samples, which the run record
says. ``disk_gb: 0`` switches the limit off (``none``).

A run killed with its driver leaves its mounts; :func:`release_stale` puts their files
back and unmounts them (the runner calls it before restaging a run folder, and every
new disk calls it for the mounts of dead processes).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from spu.schema import EnforcedLimits

log = logging.getLogger(__name__)

GIB = 1024**3
FOLDERS = ("workspace", "output")
"""The run folders the limit covers (the ones the agent writes)."""
MOUNT_PREFIX = ".spu-disk-"
IMAGE_NAME = ".spu-disk.img"
FULL_MARGIN_BYTES = 1 << 20
"""A file system with less than this free (or 0.5% of its size, the larger) is full."""
POLL_EVERY_S = 5.0
"""How often the ``polled`` fallback measures the folders."""


class DiskError(RuntimeError):
    """The run's file system could not be set up."""


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise DiskError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")


def _mounts_under(root: Path) -> list[Path]:
    """Mount points at or under ``root``, deepest first (from ``/proc/self/mountinfo``)."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    prefix = str(root).rstrip("/") + "/"
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(prefix):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk_entries(root: Path) -> Iterator[tuple[int, str, os.stat_result]]:
    """``(folder fd, name, lstat)`` of everything under ``root``, at any depth, links unfollowed.

    An agent's tree may be deeper than Python's recursion limit and than ``PATH_MAX``:
    the walk keeps one open folder (it climbs back through ``..``) and a list of the
    names still to visit at each level. ``/proc/self/fd/<fd>/<name>`` names an entry
    whatever its depth. Call it only once the agent's processes are gone (or on
    folders it cannot change): a tree that moves under the walk is skipped, not
    followed.
    """
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    pending: list[list[str]] = [os.listdir(fd)]
    try:
        while pending:
            if not pending[-1]:
                pending.pop()
                if pending:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                continue
            name = pending[-1].pop()
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            yield fd, name, info
            if stat.S_ISDIR(info.st_mode):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    names = os.listdir(child)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                pending.append(names)
    finally:
        os.close(fd)


SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
"""The write bits for the group and the world: cleared on what an agent leaves."""


def _clear_shared_write(path: Path | str, info: os.stat_result | None = None) -> int:
    """Clear group and world write on ``path`` (never through a link); 1 if it changed."""
    try:
        info = info or os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not info.st_mode & SHARED_WRITE:
            return 0
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~SHARED_WRITE)
    except OSError as exc:
        log.error("could not clear the group and world write bits of %s: %s", path, exc)
        return 0
    return 1


def disarm(root: Path) -> int:
    """Make what an agent left under ``root`` harmless to the host; returns the changes.

    Device nodes are removed (a root agent in a container can make one for the host's
    disk, which the host could open), setuid and setgid bits are cleared and file
    capabilities removed from regular files (a root shell left for the host's users).
    Links, FIFOs and sockets stay: readers open the agent's files without following
    links or blocking. Group and world write bits are cleared on ``root`` and everything
    in it (an agent's ``chmod 0777 /output`` would let any local user edit a submission
    that ``spu regrade`` reads later).
    """
    changes = _clear_shared_write(root)
    for fd, name, info in walk_entries(root):
        mode = info.st_mode
        try:
            if not stat.S_ISLNK(mode) and mode & SHARED_WRITE:
                changes += _clear_shared_write(f"/proc/self/fd/{fd}/{name}", info)
                mode &= ~SHARED_WRITE
            if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
                os.unlink(name, dir_fd=fd)
                log.warning("removed the device node %s the agent left in %s", name, root)
                changes += 1
            elif stat.S_ISREG(mode):
                path = f"/proc/self/fd/{fd}/{name}"
                if mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    changes += 1
                try:
                    os.removexattr(path, "security.capability", follow_symlinks=False)
                    changes += 1
                except OSError:
                    pass  # none set (ENODATA), or no extended attributes here
        except OSError as exc:
            log.error("could not disarm %s under %s: %s", name, root, exc)
    return changes


def remove_tree(path: Path) -> None:
    """``rm -rf`` of a folder an agent wrote (any depth; ``shutil.rmtree`` recurses)."""
    if path.is_symlink() or not path.exists():
        path.unlink(missing_ok=True)
        return
    done = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0 and path.exists():
        raise OSError(f"could not remove {path}: {done.stderr.strip()[-300:]}")


def used_bytes(folders: list[Path]) -> int:
    """Disk blocks used by everything under ``folders`` (any depth, links unfollowed)."""
    return sum(info.st_blocks * 512 for folder in folders
               for _, _, info in walk_entries(folder))


def _copy_back(source: Path, target: Path) -> None:
    """Copy a folder's contents as they are (links and FIFOs as such, owners kept).

    Extended attributes are not copied (file capabilities would travel with them).
    """
    target.mkdir(parents=True, exist_ok=True)
    if any(source.iterdir()):
        _run(["cp", "-R", "--no-dereference", "--preserve=mode,ownership,timestamps,links",
              f"{source}/.", str(target)])


class RunDisk:
    """The size-limited storage of one run's workspace and output.

    Args:
        run_dir: The run folder.
        disk_gb: The limit in GiB (0: none).
    """

    def __init__(self, run_dir: Path, disk_gb: float) -> None:
        self.run_dir = run_dir
        self.disk_gb = float(disk_gb)
        self.mechanism = "none"
        self.warnings: list[str] = []
        self.mount_point: Path | None = None
        self._next_poll = 0.0
        self._polled_full = False

    @property
    def limit_bytes(self) -> int:
        """The limit in bytes."""
        return int(self.disk_gb * GIB)

    def _can_mount(self) -> str | None:
        if os.geteuid() != 0:
            return "not running as root"
        for tool in ("mkfs.ext4", "mount", "umount", "cp"):
            if shutil.which(tool) is None:
                return f"{tool} is missing (Debian packages e2fsprogs, mount, coreutils)"
        return None

    def set_up(self) -> None:
        """Put the folders on a file system of ``disk_gb`` (or fall back to polling)."""
        for name in FOLDERS:
            (self.run_dir / name).mkdir(parents=True, exist_ok=True)
        if self.disk_gb <= 0:
            return
        why = self._can_mount()
        if why is None:
            release_stale_everywhere()
            try:
                self._mount()
                self.mechanism = "loop-ext4"
                return
            except (DiskError, OSError) as exc:
                self.release()
                why = str(exc)
        self.mechanism = "polled"
        self.warnings.append(
            f"disk limit of {self.disk_gb:g} GiB only polled every {POLL_EVERY_S:g} s, not "
            f"enforced by a file system ({why}): a fast writer can pass it between samples")

    def _mount(self) -> None:
        image = self.run_dir / IMAGE_NAME
        point = self.run_dir / f"{MOUNT_PREFIX}{os.getpid()}"
        with open(image, "wb") as f:
            f.truncate(self.limit_bytes)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E",
              "lazy_itable_init=1,lazy_journal_init=1,nodiscard", str(image)])
        point.mkdir()
        self.mount_point = point
        # noinit_itable: the kernel would otherwise zero every inode table in the
        # background, writing hundreds of MB into a 50 GB image that the run never uses.
        _run(["mount", "-o", "loop,nosuid,nodev,noinit_itable", str(image), str(point)])
        (point / "lost+found").rmdir()
        for name in FOLDERS:
            inside, host = point / name, self.run_dir / name
            inside.mkdir()
            # Whatever the run put there already (a harness's files) moves onto the disk.
            for entry in host.iterdir():
                shutil.move(str(entry), str(inside / entry.name))
            _run(["mount", "--bind", str(inside), str(host)])

    def full(self) -> bool:
        """True when the run has used its disk, bytes or inodes (stop it: ``disk_limit``)."""
        if self.mechanism == "loop-ext4" and self.mount_point is not None:
            stat = os.statvfs(self.mount_point)
            size = stat.f_blocks * stat.f_frsize
            free = stat.f_bavail * stat.f_frsize
            return free < max(FULL_MARGIN_BYTES, size // 200) or stat.f_favail == 0
        if self.mechanism == "polled":
            now = time.monotonic()
            if now >= self._next_poll:
                self._next_poll = now + POLL_EVERY_S
                used = used_bytes([self.run_dir / name for name in FOLDERS])
                self._polled_full = used >= self.limit_bytes
            return self._polled_full
        return False

    def enforced(self, limits: EnforcedLimits, log_mb: float) -> EnforcedLimits:
        """``limits`` with the disk limit and the log cap in force added."""
        return limits.model_copy(update={
            "disk_gb": self.disk_gb if self.mechanism != "none" else None,
            "disk_mechanism": self.mechanism,
            "log_mb": log_mb or None,
        })

    def release(self) -> None:
        """Disarm the agent's files, copy them back, unmount and delete the image.

        Call it once the agent's processes are gone.
        """
        if self.mount_point is not None:
            release_mount(self.run_dir, self.mount_point)
            self.mount_point = None
        else:
            for name in FOLDERS:
                disarm(self.run_dir / name)


def release_mount(run_dir: Path, point: Path) -> None:
    """Undo :meth:`RunDisk._mount` of ``run_dir`` whose file system is at ``point``."""
    mounted = set(_mounts_under(run_dir))
    for name in FOLDERS:
        host = run_dir / name
        if host in mounted:
            _umount(host)
    if point in mounted:
        for name in FOLDERS:
            if (point / name).is_dir():
                disarm(point / name)
                try:
                    _copy_back(point / name, run_dir / name)
                    _clear_shared_write(run_dir / name)  # cp gave it the copy's mode
                except DiskError as exc:
                    log.error("files of %s not copied back from the run's disk: %s",
                              run_dir / name, exc)
        _umount(point)
    try:
        point.rmdir()
    except OSError:
        pass
    (run_dir / IMAGE_NAME).unlink(missing_ok=True)


def _umount(point: Path) -> None:
    for _ in range(20):
        if subprocess.run(["umount", str(point)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)  # a process of the run may be letting go of a file
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def release_stale(run_dir: Path) -> None:
    """Release what a killed run left mounted in ``run_dir`` (its files come back)."""
    if not run_dir.is_dir():
        return
    for point in run_dir.glob(f"{MOUNT_PREFIX}*"):
        release_mount(run_dir, point)


def release_stale_everywhere() -> int:
    """Release the run disks of processes that are gone; returns how many."""
    released = 0
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        point = Path(line.split()[4].replace("\\040", " "))
        owner = point.name[len(MOUNT_PREFIX):]
        if not point.name.startswith(MOUNT_PREFIX) or not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        release_mount(point.parent, point)
        released += 1
    return released
