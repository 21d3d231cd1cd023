"""The sandbox network: the internet and the run's own host ports, nothing else of the host.

With ``sandbox.network=true`` (the paper's agents are online) the agent gets its own
network namespace whose only way out is ``pasta`` (Debian package ``passt``), a
user-mode network stack that turns the agent's packets into ordinary sockets of the
host. pasta runs with every forward off (``-t none -u none -T none -U none``), the
gateway not mapped to the host (``--no-map-gw``) and IPv4 only. The host loopback ports
of :attr:`SandboxRequest.host_ports` answer inside the sandbox at ``127.0.0.1`` on the
same port through :class:`spu.sandbox.relay.HostPortRelay` (pasta's own forwarding of
them stalls large requests: :mod:`spu.sandbox.relay`).

pasta's sockets live in the host's network namespace, so by themselves they could reach
any address the host reaches. Under root every pasta runs in a cgroup (v2) of its own,
and an iptables chain matched on that cgroup lets its sockets reach:

- the host's DNS resolvers (port 53);
- no other address of this machine (``addrtype LOCAL``: loopback, every interface,
  Docker's bridges, other runs' forwards);
- no private, shared, link-local (cloud metadata) or multicast range, and no subnet
  the host is directly connected to (the cluster's nodes): :data:`BLOCKED_NETWORKS`;
- everything else (the internet, the model provider).

A last rule rejects every socket of every pasta the framework started when its run's
chain is missing, so the filter fails closed. Without a cgroup v2 hierarchy or iptables
no filter can be installed: the run record says ``network:pasta-unfiltered`` and warns
that the host's non-loopback addresses and its local network are reachable. All of this
needs root; :mod:`spu.sandbox.local` says what happens without it.

Leftovers of a killed run (a pasta, its chain, its netns name) carry the id of the
process that made them; :func:`prune_stale_networks` removes those whose process is gone.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

if TYPE_CHECKING:
    from spu.sandbox.relay import HostPortRelay

log = logging.getLogger(__name__)

BLOCKED_NETWORKS: tuple[str, ...] = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
"""IPv4 destinations no agent reaches: this host, private and shared ranges (other
nodes of a cluster, its services), link-local (cloud metadata), multicast, reserved.
The host's directly connected subnets are added at run time."""

CGROUP_PARENT = "spu-net"
"""cgroup (v2) holding one child per running pasta; its sockets are what the filter sees."""
CHAIN_PREFIX = "SPU-"
NETNS_PREFIX = "spu-"
PASTA_TIMEOUT_S = 30.0


class NetworkError(RuntimeError):
    """The sandbox network could not be set up."""


# --------------------------------------------------------------------------- host facts


def pasta_available() -> tuple[bool, str]:
    """Whether pasta is installed."""
    if shutil.which("pasta") is None:
        return False, ("pasta is not installed (Debian package 'passt'); the agent's network "
                       "needs it (or set sandbox.network=false)")
    return True, "pasta"


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (pure v2 or the hybrid ``unified``)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def host_nameservers() -> list[str]:
    """IPv4 resolvers of ``/etc/resolv.conf`` (the agent's, too: it sees the host's ``/etc``)."""
    out: list[str] = []
    try:
        lines = Path("/etc/resolv.conf").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                if ipaddress.ip_address(fields[1]).version == 4:
                    out.append(fields[1])
            except ValueError:
                continue
    return out


def connected_subnets() -> list[str]:
    """IPv4 subnets the host reaches directly (``scope link`` routes): its cluster's nodes."""
    try:
        listing = subprocess.run(["ip", "-j", "-4", "route", "show", "scope", "link"],
                                 capture_output=True, text=True, timeout=10, check=True)
        routes = json.loads(listing.stdout or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    subnets = []
    for route in routes:
        dst = route.get("dst")
        if dst and dst != "default":
            try:
                subnets.append(str(ipaddress.ip_network(dst, strict=False)))
            except ValueError:
                continue
    return subnets


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return done


# --------------------------------------------------------------------------- the filter


def _filter_rules(chain: str, allowed: Sequence[str]) -> list[list[str]]:
    """The rules of one run's chain, in order (``iptables -A <chain>`` arguments)."""
    rules: list[list[str]] = []
    for server in host_nameservers():
        for proto in ("udp", "tcp"):
            rules.append(["-d", server, "-p", proto, "--dport", "53", "-j", "ACCEPT"])
    rules.append(["-m", "addrtype", "--dst-type", "LOCAL", "-p", "tcp",
                  "-j", "REJECT", "--reject-with", "tcp-reset"])
    rules.append(["-m", "addrtype", "--dst-type", "LOCAL", "-j", "REJECT"])
    for network in allowed:
        rules.append(["-d", network, "-j", "ACCEPT"])
    for network in [*BLOCKED_NETWORKS, *connected_subnets()]:
        rules.append(["-d", network, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
        rules.append(["-d", network, "-j", "REJECT"])
    rules.append(["-j", "ACCEPT"])
    return [[chain, *rule] for rule in rules]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", "10", *args], check=check)


def _iptables_batch(lines: Sequence[str], check: bool = True) -> bool:
    """Apply ``lines`` (``iptables`` arguments of the filter table) in one transaction.

    One ``iptables-restore --noflush`` call: all of them or none, and one turn at the
    kernel's table instead of one per rule (runs set up and torn down in parallel
    queue for that turn). Returns whether it applied.
    """
    text = "*filter\n" + "".join(f"{line}\n" for line in lines) + "COMMIT\n"
    done = subprocess.run(["iptables-restore", "-w", "10", "--noflush"], input=text,
                          capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"iptables-restore failed: {done.stderr.strip()[-300:]}")
    return done.returncode == 0


def _rule(args: Sequence[str]) -> str:
    """One rule as an ``iptables-restore`` line (arguments quoted where needed)."""
    return " ".join(f'"{a}"' if not a or any(c.isspace() for c in a) else a for a in args)


def _ensure_fail_closed_rule() -> None:
    """Reject every socket of every framework pasta that no run chain accepted."""
    rule = ["OUTPUT", "-m", "cgroup", "--path", CGROUP_PARENT, "-j", "REJECT"]
    if _iptables("-C", *rule, check=False).returncode != 0:
        with _table_lock():
            if _iptables("-C", *rule, check=False).returncode != 0:
                _iptables("-A", *rule)


def _table_lock() -> FileLock:
    """SPU's processes (and threads: a fresh lock each time) take turns at edits of OUTPUT."""
    return FileLock(Path("/run/lock") / "spu-iptables.lock")


def _remove_chain(chain: str, cgroup_path: str | None = None) -> None:
    """Delete the jump to ``chain`` and the chain.

    With the jump's cgroup path (its cgroup still exists), in one transaction by the
    rule itself; otherwise (a killed run's leftovers: its cgroup may be gone, so the
    rule cannot be named) by position, under a lock so that no other SPU process moves
    the positions between the listing and the deletion.
    """
    if cgroup_path is not None and _iptables_batch(
            [_rule(["-D", "OUTPUT", "-m", "cgroup", "--path", cgroup_path, "-j", chain]),
             f"-F {chain}", f"-X {chain}"], check=False):
        return
    with _table_lock():
        listing = _iptables("-S", "OUTPUT", check=False).stdout.splitlines()
        rules = [line for line in listing if line.startswith("-A OUTPUT")]
        lines = [f"-D OUTPUT {index + 1}" for index in reversed(range(len(rules)))
                 if rules[index].endswith(f"-j {chain}")]
        if not _iptables_batch([*lines, f"-F {chain}", f"-X {chain}"], check=False):
            for line in lines:  # a chain already gone fails the batch: one at a time
                _iptables(*line.split(), check=False)
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)


def _stale_chains() -> list[str]:
    """SPU chains no live process owns.

    Those whose owner, named in the jump's cgroup, is gone, and those no jump leads to
    (a live run never leaves a chain without one: its set-up is one transaction).
    """
    listing = _iptables("-S", check=False).stdout.splitlines()
    chains = {line.split()[1] for line in listing
              if line.startswith(f"-N {CHAIN_PREFIX}") and len(line.split()) == 2}
    owned: set[str] = set()
    for line in listing:
        fields = line.split()
        if not (line.startswith("-A OUTPUT") and fields[-2:-1] == ["-j"]
                and fields[-1] in chains):
            continue
        path = next((f.strip('"') for f in fields if f.strip('"').startswith(
            f"{CGROUP_PARENT}/")), "")
        owner = path.partition("/")[2].split("-", 1)[0]
        if owner.isdigit() and _pid_alive(int(owner)):
            owned.add(fields[-1])
    return sorted(chains - owned)


def _kill_cgroup(folder: Path) -> None:
    """SIGKILL every process of a cgroup (pasta forks into it) and wait until it is empty."""
    from spu.sandbox.limits import empty_cgroup

    empty_cgroup(folder)


def _remove_cgroup(folder: Path) -> None:
    """Empty the cgroup (its processes killed, waited for) and remove it."""
    from spu.sandbox.limits import remove_cgroup

    if not remove_cgroup(folder):
        log.warning("cgroup %s not removed (processes still in it?)", folder)


def prune_stale_networks() -> int:
    """Remove the pasta, chain, netns name and cgroup of runs whose process is gone.

    Each run's pieces are named ``<pid>-<random>`` after the process that set them up,
    so a relaunch after ``kill -9`` cleans what the killed run left. Returns how many
    were removed.
    """
    root = cgroup2_root()
    if root is None or os.geteuid() != 0:
        return 0
    parent = root / CGROUP_PARENT
    removed = 0
    for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
        owner = folder.name.split("-", 1)[0]
        if not folder.is_dir() or not owner.isdigit() or _pid_alive(int(owner)):
            continue
        ident = folder.name
        _kill_cgroup(folder)
        _remove_chain(CHAIN_PREFIX + ident.split("-", 1)[1], f"{CGROUP_PARENT}/{ident}")
        _remove_cgroup(folder)
        _run(["ip", "netns", "delete", NETNS_PREFIX + ident], check=False)
        removed += 1
    if shutil.which("iptables") is not None:
        for chain in _stale_chains():  # a chain whose cgroup went first
            _remove_chain(chain)
            removed += 1
    return removed


# --------------------------------------------------------------------------- one network


class UserNetwork:
    """pasta attached to one sandbox's network namespace, behind the egress filter.

    Args:
        host_ports: Host loopback TCP ports the agent may reach (same port inside).
        allowed_networks: IPv4 networks reachable although private or directly connected
            (e.g. a site's HTTP proxy); never an address of this host.
        log_file: Where pasta's messages go (the run's ``logs/``).
    """

    mode_filtered = "pasta-filtered"
    mode_unfiltered = "pasta-unfiltered"

    def __init__(self, host_ports: Sequence[int] = (), allowed_networks: Sequence[str] = (),
                 log_file: Path | None = None) -> None:
        for port in host_ports:
            if not 0 < int(port) < 65536:
                raise NetworkError(f"host port {port!r} is not a TCP port number")
        for network in allowed_networks:
            try:
                ipaddress.IPv4Network(network, strict=False)
            except ValueError:
                raise NetworkError(f"sandbox.allowed_networks: {network!r} is not an IPv4 "
                                   f"network") from None
        self.host_ports = sorted({int(p) for p in host_ports})
        self.allowed_networks = list(allowed_networks)
        self.log_file = log_file
        self.ident = f"{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.warnings: list[str] = []
        self.root = os.geteuid() == 0
        self._cgroup: Path | None = None
        self._chain: str | None = None
        self._netns: str | None = None
        self._pasta_pid: int | None = None
        self._relay: HostPortRelay | None = None
        self.filtered = False

    @property
    def mode(self) -> str:
        """``pasta-filtered`` with the egress filter in force, else ``pasta-unfiltered``."""
        return self.mode_filtered if self.filtered else self.mode_unfiltered

    def _set_up_filter(self) -> None:
        root = cgroup2_root()
        if root is None or shutil.which("iptables") is None:
            why = "no cgroup v2 hierarchy" if root is None else "iptables is missing"
            self.warnings.append(
                f"network egress filter not in force ({why}): the agent reaches this "
                f"machine's non-loopback addresses and its local network through pasta")
            return
        prune_stale_networks()
        parent = root / CGROUP_PARENT
        parent.mkdir(exist_ok=True)
        self._cgroup = parent / self.ident
        self._cgroup.mkdir()
        self._chain = CHAIN_PREFIX + self.ident.split("-", 1)[1]
        _ensure_fail_closed_rule()
        # The chain, its rules and the jump to it: one transaction.
        _iptables_batch([f":{self._chain} - [0:0]",
                         *(_rule(["-A", *rule]) for rule in _filter_rules(
                             self._chain, self.allowed_networks)),
                         _rule(["-I", "OUTPUT", "1", "-m", "cgroup", "--path",
                                self._cgroup_path, "-j", self._chain])])
        self.filtered = True

    @property
    def _cgroup_path(self) -> str:
        return f"{CGROUP_PARENT}/{self.ident}"

    def _join_cgroup(self, pid: int) -> None:
        if self._cgroup is not None:
            (self._cgroup / "cgroup.procs").write_text(str(pid))

    def attach(self, pid: int) -> None:
        """Give the network namespace of process ``pid`` its way out; returns when it is up.

        The namespace gets a name (``ip netns attach``) that pasta joins: root's work
        (bubblewrap's and Docker's processes cannot be inspected by an ordinary user).
        """
        if not self.root:
            raise NetworkError("the sandbox network needs root (pasta joins the sandbox's "
                               "namespace through ip netns)")
        try:
            self._set_up_filter()
            self._open_relay(pid)
            argv = ["pasta", "--config-net", "--no-map-gw", "--ipv4-only", "--quiet",
                    "-t", "none", "-u", "none", "-T", "none", "-U", "none"]
            pid_file = Path(f"/tmp/spu-pasta-{self.ident}.pid")
            argv += ["-P", str(pid_file)]
            if self.log_file is not None:
                argv += ["-l", str(self.log_file)]
            self._netns = NETNS_PREFIX + self.ident
            _run(["ip", "netns", "attach", self._netns, str(pid)])
            # pasta would switch to nobody before joining, which only root may do.
            argv += ["--runas", "0:0", "--netns", self._netns]
            from spu.sandbox.process import start_placed

            # pasta starts held, joins its cgroup from here, then forks its daemon in it.
            pasta = start_placed(argv, os.environ, self._join_cgroup, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            try:
                _, err = pasta.communicate(timeout=PASTA_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pasta.kill()
                pasta.communicate()
                raise
            if pasta.returncode != 0:
                raise NetworkError(f"pasta did not start: {err.strip()[-400:]}")
            try:
                self._pasta_pid = int(pid_file.read_text())
            finally:
                pid_file.unlink(missing_ok=True)
        except (OSError, subprocess.SubprocessError) as exc:  # RelayError included
            self.close()
            raise NetworkError(f"the sandbox network could not be set up: {exc}") from None
        except NetworkError:
            self.close()
            raise

    def _open_relay(self, pid: int) -> None:
        """The run's host ports, answering in the namespace of ``pid`` (:mod:`.relay`)."""
        if not self.host_ports:
            return
        from spu.sandbox.relay import HostPortRelay, sockets_in_namespace

        listeners = sockets_in_namespace(f"/proc/{pid}/ns/net", self.host_ports)
        self._relay = HostPortRelay(listeners).start()

    def isolation(self) -> list[str]:
        """Entries for ``run.json``'s ``sandbox.isolation``."""
        return ["network-namespace", f"network:{self.mode}"]

    def close(self) -> None:
        """Stop the relay and pasta, remove the filter, the namespace's name and the cgroup."""
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self._pasta_pid is not None:
            try:
                os.kill(self._pasta_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._pasta_pid = None
        if self._cgroup is not None:
            # Killed now, waited for below: pasta's exit (tens of ms, its buffers freed)
            # overlaps the chain's removal. Meanwhile its sockets, if any were left, meet the
            # fail-closed rule of the cgroup's parent.
            from spu.sandbox.limits import kill_cgroup

            kill_cgroup(self._cgroup)
        if self._chain is not None:
            _remove_chain(self._chain, self._cgroup_path if self._cgroup else None)
            self._chain = None
        if self._cgroup is not None:
            _remove_cgroup(self._cgroup)
            self._cgroup = None
        if self._netns is not None:
            _run(["ip", "netns", "delete", self._netns], check=False)
            self._netns = None
