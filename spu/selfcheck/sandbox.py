"""Conformance checks of a sandbox backend (STYLE: Inspect AI's ``self_check``).

Each check runs a small agent of the kit (:data:`spu.selfcheck.AGENTS`) in the backend
and checks what it saw and what the backend reports. A backend that isolates nothing
(``Sandbox.isolates`` false, like ``subprocess``) is checked for saying so; the isolation
checks run on the others. ``spu selfcheck sandbox=NAME`` runs them, and so does
``tests/sandbox/test_conformance.py`` for every backend of the machine.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from spu.sandbox.base import RunLimits
from spu.selfcheck import CheckFailed, CheckSkipped, check, expect
from spu.selfcheck.targets import (
    TASK_ID,
    Opened,
    SandboxTarget,
    environment,
    read_json,
    run_agent,
)

GIB = 1 << 30


def _probe(box: Opened, **env: str) -> tuple[Any, dict[str, Any]]:
    box.sandbox.write_file(f"{box.paths.workspace}/from-host.txt", b"written by the host")
    evidence = run_agent(box, "probe.py", env=env)
    return evidence, read_json(box.output("probe.json"))


def _limits(box: Opened) -> Any:
    """The limits the backend says it enforces (CheckFailed when it says none)."""
    limits = box.sandbox.info().limits
    if limits is None:
        raise CheckFailed("the backend records no enforced limits")
    return limits


def _sampled(target: SandboxTarget) -> bool:
    """A container backend, whose memory peak is sampled (a fast hog may be missed)."""
    return "docker" in target.cls.needs


@check("sandbox")
def layout_files_and_logs(target: SandboxTarget) -> None:
    """The agent sees the public task files, works in its workspace, writes its output."""
    from spu.tasks.package import PUBLIC_PATHS

    box = target.open()
    evidence, seen = _probe(box)
    expect(evidence.exit_code == 0 and evidence.error is None and not evidence.timed_out,
           f"the probe did not end cleanly: {evidence}")
    public = sorted(p for p in PUBLIC_PATHS if (target.task_dir / p).exists())
    expect(seen["task_files"] == public,
           f"the agent saw {seen['task_files']}, not exactly the public files {public}")
    expect(seen["contract_task_id"] == TASK_ID, "the staged contract is not the task's")
    expect(seen["cwd"] == box.paths.workspace and seen["home"] == box.paths.workspace,
           f"cwd {seen['cwd']} and HOME {seen['home']} are not the workspace")
    expect(seen["host_file"] == "written by the host", "a file the host wrote is not seen")
    expect(seen["write_workspace"] == "ok" and seen["write_output"] == "ok",
           "the agent cannot write its workspace and output")
    expect(box.sandbox.read_file(f"{box.paths.output}/written-inside.txt") == b"inside",
           "read_file does not return what the agent wrote")
    expect((box.sandbox.collect() / "written-inside.txt").read_bytes() == b"inside",
           "collect() does not bring the output back")
    logs = box.run_dir / "logs"
    expect((logs / "probe.py.stdout").read_text().strip() == "probe done",
           "stdout is not logged")
    expect((logs / "probe.py.stderr").read_text().strip() == "to stderr", "stderr is not logged")


@check("sandbox")
def environment_is_cleared(target: SandboxTarget) -> None:
    """Only what the harness passes (plus HOME, PATH) reaches the agent."""
    with environment(SPU_HOST_SECRET="must-not-leak"):
        box = target.open()
        _, seen = _probe(box, EXTRA_FROM_HARNESS="1")
    expect("SPU_HOST_SECRET" not in seen["env"], "a variable of the host reached the agent")
    missing = {"SPU_TASK_DIR", "SPU_OUTPUT_DIR", "EXTRA_FROM_HARNESS", "HOME", "PATH"} - set(
        seen["env"])
    expect(not missing, f"the agent lacks {sorted(missing)}")
    leaked = set(seen["env"]) - {"SPU_TASK_DIR", "SPU_OUTPUT_DIR", "SPU_WORKSPACE",
                                 "EXTRA_FROM_HARNESS", "HOME", "PATH", "LANG", "PWD",
                                 "LC_CTYPE", "HOSTNAME",
                                 "PYTHONDONTWRITEBYTECODE"}  # an image's own ENV
    expect(not leaked, f"host environment leaked: {sorted(leaked)}")


@check("sandbox", isolating=True)
def task_is_read_only_and_host_processes_invisible(target: SandboxTarget) -> None:
    """/task cannot be changed; the agent sees only its own processes, not the host's."""
    box = target.open()
    before = (box.run_dir / "task" / "task.yaml").read_bytes()
    _, seen = _probe(box)
    expect(seen["write_task"] != "ok" and seen["append_task"] != "ok",
           "the agent could write to /task")
    expect((box.run_dir / "task" / "task.yaml").read_bytes() == before, "task.yaml changed")
    expect(not (box.run_dir / "task" / "planted.txt").exists(), "a file was planted in /task")
    expect(len(seen["pids"]) <= 3, f"host processes visible: {seen['pids']}")
    expect(seen["hostname"] == "spu-sandbox", f"hostname {seen['hostname']!r}")


@check("sandbox", unisolated=True)
def an_unisolated_backend_says_so(target: SandboxTarget) -> None:
    """A backend that isolates nothing runs on the host and its record says so loudly."""
    box = target.open()
    _, seen = _probe(box)
    info = box.sandbox.info()
    expect(info.warnings, "no warning in the record of a run without isolation")
    expect("network-namespace" not in info.isolation,
           f"it claims isolation it lacks: {info.isolation}")
    expect(os.getpid() in seen["pids"], "a plain process should see the host's processes")


@check("sandbox", isolating=True)
def network_off_leaves_only_loopback(target: SandboxTarget) -> None:
    """``network=false`` cuts the agent off; the default keeps it on (paper: internet on)."""
    off = target.open(run="off", network=False)
    _, seen_off = _probe(off)
    expect(seen_off["interfaces"] == ["lo"], f"offline interfaces: {seen_off['interfaces']}")
    expect("network-namespace" in off.sandbox.info().isolation, "no network namespace said")
    on = target.open(run="on")
    _, seen_on = _probe(on)
    expect(set(seen_on["interfaces"]) - {"lo"}, "the default network is off")


@check("sandbox", isolating=True)
def extra_binds_are_read_only(target: SandboxTarget) -> None:
    """A harness's cached tools folder is mounted where it asks, and cannot be changed."""
    tools = target.scratch / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "cli.txt").write_text("cached tool")
    box = target.open(extra_ro_binds={str(tools): "/spu-test-tools"})
    logs = box.run_dir / "logs"
    script = ("import sys\n"
              "print(open('/spu-test-tools/cli.txt').read())\n"
              "try:\n    open('/spu-test-tools/cli.txt', 'a').write('x')\n"
              "except OSError as e:\n    sys.exit(7)\n")
    evidence = box.sandbox.exec(["python3", "-c", script], {"PATH": "/usr/bin:/bin"},
                                stdout=logs / "b.out", stderr=logs / "b.err")
    expect(evidence.exit_code == 7, f"the bind was writable or absent: "
                                    f"{(logs / 'b.err').read_text()[-300:]}")
    expect((logs / "b.out").read_text().strip() == "cached tool", "the bind was not readable")
    expect((tools / "cli.txt").read_text() == "cached tool", "the host file changed")


@check("sandbox")
def exit_status_and_evidence(target: SandboxTarget) -> None:
    """The agent's exit status comes back as the evidence's exit code."""
    box = target.open()
    evidence, _ = _probe(box, PROBE_EXIT="3")
    expect(evidence.exit_code == 3 and evidence.signal is None, f"exit status: {evidence}")
    expect(not evidence.timed_out and not evidence.oom_killed and evidence.error is None,
           f"a clean exit reported otherwise: {evidence}")
    expect(evidence.duration_s > 0, "no duration")
    crash = run_agent(box, "crash.py")
    expect(crash.exit_code == 1 and crash.error is None, f"a crash reported as {crash}")
    expect("agent crashed" in (box.run_dir / "logs" / "crash.py.stderr").read_text(),
           "the crash's traceback is not logged")


@check("sandbox")
def wall_limit_stops_the_agent_and_keeps_its_output(target: SandboxTarget) -> None:
    """At the limit the agent is stopped (SIGTERM, then SIGKILL); what it wrote stays."""
    box = target.open(RunLimits(time_s=3, memory_gb=0.5, cpus=1, gpus=0, grace_s=1))
    evidence = run_agent(box, "sleeper.py")
    expect(evidence.timed_out and not evidence.oom_killed, f"not a timeout: {evidence}")
    # The sleeper ignores SIGTERM, so only the SIGKILL after the grace period ends it.
    expect(evidence.signal == signal.SIGKILL, f"ended by signal {evidence.signal}")
    expect(read_json(box.output("rankings.json"))["task_id"] == TASK_ID,
           "the submission written before the limit is lost")
    expect(evidence.peak_memory_bytes and evidence.peak_memory_bytes > 0, "no memory peak")


@check("sandbox")
def memory_limit_kills_a_hog_and_is_recognised(target: SandboxTarget) -> None:
    """A hog is killed by the memory limit, and the kernel's OOM event says so."""
    box = target.open(RunLimits(time_s=60, memory_gb=0.2, cpus=1, gpus=0, grace_s=1))
    if _limits(box).memory_mechanism == "rlimit-as":
        raise CheckSkipped("no writable memory cgroup here: RLIMIT_AS leaves no OOM event")
    evidence = run_agent(box, "hog.py")
    expect(evidence.oom_killed and not evidence.timed_out, f"not an OOM kill: {evidence}")
    expect(evidence.exit_code == 137 or evidence.signal == signal.SIGKILL,
           f"ended as {evidence}")
    expect(box.output("started.txt").read_text() == "hog started\n", "its note is lost")
    if not _sampled(target):
        expect((evidence.peak_memory_bytes or 0) >= 0.9 * 0.2 * GIB,
               f"peak {evidence.peak_memory_bytes} below the limit it hit")


@check("sandbox")
def limits_on_a_smaller_machine_are_recorded_as_enforced(target: SandboxTarget) -> None:
    """Asking for 8 CPUs and a GPU on a smaller machine gives what exists, with warnings."""
    box = target.open(RunLimits(time_s=60, memory_gb=0.5, cpus=8, gpus=1, grace_s=1))
    info = box.sandbox.info()
    limits = _limits(box)
    machine = len(os.sched_getaffinity(0))
    expect(info.backend == target.cls.name, f"the record names backend {info.backend}")
    expect(limits.cpus == min(8, machine), f"cpus recorded {limits.cpus}")
    expect(limits.memory_gb == 0.5 and limits.time_s == 60, f"{limits}")
    expect(limits.pids_limit == box.sandbox.options.get("pids_limit"),
           f"pids limit recorded {limits.pids_limit}")
    if machine < 8:
        expect(any("asked for 8 CPUs" in w for w in info.warnings), "no warning for CPUs")
    if not any(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev")):
        expect(limits.gpus == [], f"GPUs recorded: {limits.gpus}")
        expect(any("this machine has none" in w for w in info.warnings), "no GPU warning")
    if not _sampled(target):
        _, seen = _probe(box)
        expect(seen["cpus"] == limits.cpus, f"the agent sees {seen['cpus']} CPUs")


@check("sandbox")
def a_program_that_cannot_start_is_an_infrastructure_error(target: SandboxTarget) -> None:
    """The sandbox, not the agent, failed: the evidence carries an error (infra_error)."""
    box = target.open()
    logs = box.run_dir / "logs"
    evidence = box.sandbox.exec(["/nonexistent/agent"], {"PATH": "/usr/bin:/bin"},
                                stdout=logs / "x.out", stderr=logs / "x.err")
    expect(evidence.error, f"no error in the evidence: {evidence}")


def _tagged(tag: str) -> list[int]:
    """Processes of this machine whose name (argv[0]) is ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0 == tag.encode():
                found.append(int(entry.name))
    return found


@check("sandbox")
def cleanup_leaves_no_process_behind(target: SandboxTarget) -> None:
    """A daemon the agent leaves behind does not outlive the run (nor its cgroups)."""
    tag = f"spu-selfcheck-daemon-{uuid.uuid4().hex[:12]}"
    box = target.open()
    evidence = run_agent(box, "daemon.py", env={"DAEMON_TAG": tag})
    expect(evidence.exit_code == 0, f"the daemon's parent failed: {evidence}")
    expect(box.output("daemon.pid").is_file(), "the daemon did not start")
    host_limits = getattr(type(box.sandbox), "host_limits", False)
    cgroups = list(box.sandbox.enforcer.cgroup_paths) if host_limits else []
    container = getattr(box.sandbox, "sandbox_id", None) if _sampled(target) else None
    box.sandbox.cleanup()
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    expect(not _tagged(tag), f"the daemon survived its run: {_tagged(tag)}")
    expect(not any(p.exists() for p in cgroups),
           f"cgroups left: {[str(p) for p in cgroups if p.exists()]}")
    if container:
        from spu.sandbox.docker import RUN_LABEL, docker_client

        left = docker_client().containers.list(all=True,
                                               filters={"label": f"{RUN_LABEL}={container}"})
        expect(left == [], f"containers left: {[c.name for c in left]}")


@check("sandbox")
def framework_file_access_never_follows_a_planted_link(target: SandboxTarget) -> None:
    """The framework's file access never goes through a link the agent planted.

    ``write_file``/``read_file`` (the framework, as root) refuse such a path: no host file
    is written or read.
    """
    from spu.sandbox import SandboxError

    box = target.open()
    host = target.scratch / "host-folder"
    host.mkdir(parents=True, exist_ok=True)
    (host / "secret.txt").write_text("host secret")
    workspace = box.sandbox.layout_roots().workspace
    os.symlink(host, workspace / ".agent")
    os.symlink(host / "secret.txt", workspace / "notes.txt")
    inside = box.paths.workspace
    for action, refused in (
        (lambda: box.sandbox.write_file(f"{inside}/.agent/agent.py", b"overwritten"),
         SandboxError),
        (lambda: box.sandbox.read_file(f"{inside}/.agent/secret.txt"), SandboxError),
        (lambda: box.sandbox.read_file(f"{inside}/notes.txt"), OSError),
        (lambda: box.sandbox.write_file(f"{inside}/notes.txt", b"overwritten"), OSError),
    ):
        try:
            action()
        except refused:
            continue
        raise CheckFailed("a file access went through a link the agent planted")
    expect(sorted(p.name for p in host.iterdir()) == ["secret.txt"], "a host file was made")
    expect((host / "secret.txt").read_text() == "host secret", "a host file was changed")
    box.sandbox.write_file(f"{inside}/sub/ok.txt", b"fine")
    expect(box.sandbox.read_file(f"{inside}/sub/ok.txt") == b"fine",
           "a plain path was refused")
