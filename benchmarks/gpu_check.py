"""GPU check on an NVIDIA machine: Ray's placement reaches the sandbox, NVML sees it busy.

Usage::

    .venv/bin/python benchmarks/gpu_check.py [--seconds 15] [--backends local,docker]

For each sandbox backend available here (``local``: bubblewrap with
``CUDA_VISIBLE_DEVICES`` and the ``/dev/nvidia*`` nodes of the placement; ``docker``:
``device_requests``), a Ray task asking for ``num_gpus=1`` opens the sandbox with the
GPU ids Ray assigned (``ray.get_gpu_ids()``, as the launcher's workers do) and runs a
workload in it: a CUDA driver-API loop (``libcuda`` through ctypes, no framework needed)
that prints the UUID of the one device it sees and keeps it busy with memsets. Meanwhile
this process polls NVML (``nvidia-smi --query-gpu``) every 0.5 s. The check passes when
the device the sandbox saw is the one Ray assigned, the sandbox saw no other, and NVML
reported that GPU busy (utilization above 0, or memory in use) while the workload ran.

Then the check of ``hydra.launcher.placement=actors`` (``--actors``, on by default): one
launcher actor (``RunActor``, the sweep's own class) per GPU of the machine, each asking
``num_gpus=1``. Each must report a device of its own (``CUDA_VISIBLE_DEVICES`` equal to
the id Ray assigned, and the UUID NVML gives that index, read through ``nvidia-ml-py``
where installed), pass its first health check, run the workload in its sandbox on that
device (the sandbox must see exactly that UUID) and pass the health check after it; no
two actors may share a UUID. Without ``nvidia-ml-py`` the actors say so once, their UUID
is null and that part of the check is reported as not checked.

On a machine without an NVIDIA GPU it says so and exits 0 ("SKIPPED").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

WORKLOAD = r"""
import ctypes, json, os, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def ok(code, what):
    if code != 0:
        print(json.dumps({"error": f"{what} failed: {code}"})); sys.exit(1)
ok(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
ok(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
dev = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
uuid = (ctypes.c_ubyte * 16)()
ok(cuda.cuDeviceGetUuid(uuid, dev), "cuDeviceGetUuid")
hexed = bytes(uuid).hex()
name = "GPU-" + "-".join((hexed[:8], hexed[8:12], hexed[12:16], hexed[16:20], hexed[20:]))
ctx = ctypes.c_void_p()
ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
size = 1 << 30
ptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
end = time.time() + float(sys.argv[1])
loops = 0
while time.time() < end:
    ok(cuda.cuMemsetD8_v2(ptr, loops % 256, ctypes.c_size_t(size)), "cuMemsetD8")
    loops += 1
ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print(json.dumps({"visible": count.value, "uuid": name, "loops": loops,
                  "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}))
"""


def host_gpus() -> list[dict[str, str]]:
    """Index and UUID of every GPU NVML shows (empty without nvidia-smi or a GPU)."""
    if shutil.which("nvidia-smi") is None:
        return []
    done = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return []
    rows = [line.split(", ") for line in done.stdout.strip().splitlines() if line.strip()]
    return [{"index": r[0].strip(), "uuid": r[1].strip()} for r in rows if len(r) == 2]


def poll_nvml(stop: threading.Event, seen: dict[str, dict[str, float]]) -> None:
    """Record, per GPU UUID, the highest utilization and memory use NVML reports."""
    while not stop.is_set():
        done = subprocess.run(["nvidia-smi", "--query-gpu=uuid,utilization.gpu,memory.used",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True)
        for line in done.stdout.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3:
                peak = seen.setdefault(parts[0], {"util": 0.0, "mem_mib": 0.0})
                peak["util"] = max(peak["util"], float(parts[1] or 0))
                peak["mem_mib"] = max(peak["mem_mib"], float(parts[2] or 0))
        stop.wait(0.5)


def run_in_sandbox(backend: str, gpu_ids: list[str], seconds: float) -> dict[str, object]:
    """Open ``backend`` with ``gpu_ids``, run the workload, return what it printed."""
    from spu.sandbox.base import RunLimits, SandboxRequest, get_sandbox

    cls = get_sandbox(backend)
    work = Path(tempfile.mkdtemp(prefix="spu-gpu-check-"))
    try:
        task = work / "task"
        task.mkdir()
        (task / "gpu_load.py").write_text(WORKLOAD)
        box = cls(options={"pids_limit": 512})
        box.prepare(SandboxRequest(task_dir=task, run_dir=work / "run",
                                   limits=RunLimits(time_s=seconds + 120, memory_gb=4, cpus=1,
                                                    gpus=len(gpu_ids)),
                                   gpu_ids=gpu_ids, network=False))
        out = work / "stdout"
        try:
            evidence = box.exec(["python3", "/task/gpu_load.py", str(seconds)],
                                {"PATH": "/usr/local/bin:/usr/bin:/bin"}, stdout=out,
                                stderr=work / "stderr")
            info = box.info()
        finally:
            box.cleanup()
        text = out.read_text().strip().splitlines()
        result = json.loads(text[-1]) if text else {
            "error": (work / "stderr").read_text()[-500:]}
        result["exit_code"] = evidence.exit_code
        result["isolation"] = info.isolation
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_actors(gpus: list[dict[str, str]], backend: str, seconds: float) -> bool:
    """One launcher actor per GPU: own device, UUID, health before and after a workload."""
    import ray
    from hydra_plugins.spu_ray_launcher._worker import RunActor

    class CheckedActor(RunActor):
        """The launcher's actor with one more method: the workload on its own device."""

        def workload(self, backend: str, seconds: float) -> dict[str, object]:
            result = run_in_sandbox(backend, list(self.devices), seconds)
            self.runs += 1
            report = self.health.check(self.runs)
            return {**result, "problem_after": report.problem, "notes_after": report.notes}

    actor_class: Any = ray.remote(num_gpus=1, num_cpus=0)(CheckedActor)
    actors: list[Any] = [actor_class.remote(f"spu-gpu-check-{i}", i, None, backend)
              for i in range(len(gpus))]
    infos = ray.get([a.ready.remote() for a in actors], timeout=300)
    results = ray.get([a.workload.remote(backend, seconds) for a in actors],
                      timeout=seconds + 600)
    by_index = {g["index"]: g["uuid"] for g in gpus}
    passed = True
    uuids = []
    for info, result in zip(infos, results, strict=True):
        devices = list(info["devices"])  # type: ignore[call-overload]
        want = by_index.get(devices[0]) if len(devices) == 1 else None
        own = (len(devices) == 1 and info["visible_devices"] == devices[0]
               and result.get("uuid") == want and result.get("visible") == 1)
        nvml = ("not checked (no nvidia-ml-py)" if info["uuid"] is None
                else "matches" if info["uuid"] == want else f"MISMATCH ({info['uuid']})")
        healthy = not info["problem"] and not result.get("problem_after")
        ok = own and healthy and not nvml.startswith("MISMATCH")
        passed &= ok
        uuids.append(want)
        print(f"GPU check [actors/{backend}]: {'PASS' if ok else 'FAIL'}: {info['name']} got "
              f"{devices} (CUDA_VISIBLE_DEVICES={info['visible_devices']}, {want}); NVML UUID "
              f"{nvml}; the sandbox saw {result.get('visible')} device(s), {result.get('uuid')}; "
              f"health before: {info['problem'] or 'ok'}, after: "
              f"{result.get('problem_after') or 'ok'}; notes: "
              f"{'; '.join([*info['notes'], *result.get('notes_after', [])]) or 'none'}"  # type: ignore[list-item]
              + (f"; error: {str(result['error']).strip().splitlines()[-1:]}"
                 if "error" in result else ""))
    if len(set(uuids)) != len(uuids):
        print(f"GPU check [actors/{backend}]: FAIL: two actors share a device: {uuids}")
        passed = False
    for actor in actors:
        ray.kill(actor)
    return passed


def main() -> int:
    """Run the check on every backend asked for; print one verdict line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--actors", action=argparse.BooleanOptionalAction, default=True,
                        help="also check placement=actors (one launcher actor per GPU)")
    args = parser.parse_args()
    gpus = host_gpus()
    if not gpus:
        why = ("nvidia-smi is not installed" if shutil.which("nvidia-smi") is None
               else "nvidia-smi lists no GPU")
        print(f"GPU check: SKIPPED: no NVIDIA GPU on this machine ({why})")
        return 0
    import ray

    from spu.sandbox.base import get_sandbox

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, throw-away Ray
    ray.init(num_gpus=len(gpus), num_cpus=2, include_dashboard=False, log_to_driver=False)
    failures = 0
    try:
        for backend in args.backends.split(","):
            ok, why = get_sandbox(backend).available()
            if not ok:
                print(f"GPU check [{backend}]: SKIPPED: {why}")
                continue

            @ray.remote(num_gpus=1, num_cpus=0)
            def placed(backend: str = backend) -> dict[str, object]:
                ids = [str(g) for g in ray.get_gpu_ids()]
                return {"ray_gpu_ids": ids, **run_in_sandbox(backend, ids, args.seconds)}

            seen: dict[str, dict[str, float]] = {}
            stop = threading.Event()
            poller = threading.Thread(target=poll_nvml, args=(stop, seen), daemon=True)
            poller.start()
            started = time.perf_counter()
            result = ray.get(placed.remote(), timeout=args.seconds + 600)
            stop.set()
            poller.join(timeout=10)
            assigned = [g for g in gpus if g["index"] in result["ray_gpu_ids"]]  # type: ignore[operator]
            want = assigned[0]["uuid"] if assigned else None
            busy = seen.get(want or "", {})
            passed = (want is not None and result.get("uuid") == want
                      and result.get("visible") == 1
                      and (busy.get("util", 0) > 0 or busy.get("mem_mib", 0) > 0))
            failures += not passed
            print(f"GPU check [{backend}]: {'PASS' if passed else 'FAIL'}: Ray assigned "
                  f"{result['ray_gpu_ids']} ({want}); the sandbox ({result.get('isolation')}) "
                  f"saw {result.get('visible')} device(s), {result.get('uuid')}, "
                  f"CUDA_VISIBLE_DEVICES={result.get('CUDA_VISIBLE_DEVICES')}; NVML peak on it: "
                  f"{busy.get('util', 0):.0f}% utilization, {busy.get('mem_mib', 0):.0f} MiB "
                  f"({time.perf_counter() - started:.0f} s)"
                  + (f"; error: {result['error']}" if "error" in result else ""))
            if args.actors:
                failures += not check_actors(gpus, backend, args.seconds)
    finally:
        ray.shutdown()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
