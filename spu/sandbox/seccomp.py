"""The ``sandbox=local`` seccomp filter: what the kernel gives any process, the agent never gets.

Namespaces and a dropped user close most of the host, but two kernel facilities are
shared by every process of a user whatever its namespaces:

- **keyrings** (``add_key``, ``keyctl``, ``request_key``): the user keyring of ``nobody``
  outlives a run, so one agent could leave a value there that a later run reads (a
  channel between runs, and a way to persist). The session keyring bubblewrap hands
  down is the framework's own.
- **user namespaces** (``unshare``/``clone`` with ``CLONE_NEWUSER``): full capabilities
  inside a namespace of its own, the kernel surface most privilege escalations use.

The filter refuses these with ``EPERM`` (``clone3``, whose flags a classic filter cannot
read, with ``ENOSYS``, so that the C library falls back to ``clone``), as Docker's default
profile does, and lets everything else through. It is built with libseccomp (Debian
package ``libseccomp2``, loaded with :mod:`ctypes`) for the machine's architecture and
its 32-bit companions, and handed to bubblewrap (``--seccomp FD``), which installs it
just before the agent's program starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from functools import lru_cache

SCMP_ACT_ALLOW = 0x7FFF0000
CLONE_NEWUSER = 0x10000000
SCMP_CMP_MASKED_EQ = 7

DENIED = ("add_key", "keyctl", "request_key")
"""System calls refused outright (the keyrings)."""
COMPANION_ARCHES = {
    "x86_64": (0x40000003, 0x4000003E),  # i386, x32
    "aarch64": (0x40000028,),  # arm
}
"""32-bit ABIs a process of the machine's architecture may also call the kernel through."""


class SeccompError(RuntimeError):
    """The filter could not be built (libseccomp missing or refusing a rule)."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise SeccompError("libseccomp is not installed (Debian package libseccomp2)") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str,
          masked_arg0: int | None = None) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:
        return  # not a system call of this architecture
    args = (_ArgCmp * 1)(_ArgCmp(0, SCMP_CMP_MASKED_EQ, masked_arg0, masked_arg0)) \
        if masked_arg0 is not None else None
    done = lib.seccomp_rule_add_array(ctx, action, number, 1 if args else 0, args)
    if done < 0:
        raise SeccompError(f"libseccomp refused the rule for {name}: "
                           f"{os.strerror(-done)}")


@lru_cache(maxsize=1)
def agent_filter_bpf() -> bytes:
    """The filter as a BPF program, ready for ``bwrap --seccomp``.

    Built once per process and kept: a long-lived worker (a Ray actor) reuses it for
    every run; each run still gets its own file descriptor (:func:`filter_fd`).
    """
    lib = _library()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompError("seccomp_init failed")
    try:
        for arch in COMPANION_ARCHES.get(os.uname().machine, ()):
            done = lib.seccomp_arch_add(ctx, arch)
            if done < 0 and -done != errno.EEXIST:
                raise SeccompError(f"libseccomp refused architecture {arch:#x}: "
                                   f"{os.strerror(-done)}")
        refuse = _act_errno(errno.EPERM)
        for name in DENIED:
            _rule(lib, ctx, refuse, name)
        _rule(lib, ctx, refuse, "unshare", masked_arg0=CLONE_NEWUSER)
        _rule(lib, ctx, refuse, "clone", masked_arg0=CLONE_NEWUSER)
        _rule(lib, ctx, _act_errno(errno.ENOSYS), "clone3")
        fd = os.memfd_create("spu-seccomp")
        try:
            done = lib.seccomp_export_bpf(ctx, fd)
            if done < 0:
                raise SeccompError(f"seccomp_export_bpf failed: {os.strerror(-done)}")
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def filter_fd() -> int:
    """A new file descriptor holding the filter at offset 0 (the caller closes it)."""
    program = agent_filter_bpf()
    fd = os.memfd_create("spu-seccomp")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
