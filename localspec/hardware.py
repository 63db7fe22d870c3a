"""Facts about this machine that decide thread counts and GPU offload."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def physical_cores() -> int:
    """Physical core count: llama.cpp's CPU kernels slow down badly when hyperthreads are oversubscribed."""
    system = platform.system()
    if system == "Linux":
        cores = _linux_physical_cores(Path("/proc/cpuinfo"))
        if cores:
            return _limit_to_affinity(cores)
    elif system == "Darwin":
        for key in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):
            try:
                out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5)
                if out.returncode == 0 and out.stdout.strip().isdigit():
                    return max(1, int(out.stdout.strip()))
            except (OSError, subprocess.SubprocessError):
                continue
    return max(1, os.cpu_count() or 1)


def _linux_physical_cores(cpuinfo: Path) -> int:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return 0
    cores: set[tuple[str, str]] = set()
    physical_id = core_id = ""
    for line in text.splitlines() + [""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
        elif not key and core_id:
            cores.add((physical_id, core_id))
            physical_id = core_id = ""
    return len(cores)


def _limit_to_affinity(cores: int) -> int:
    # Containers often see every host core in /proc/cpuinfo but may run on only a few.
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, usable))


def default_gpu_layers() -> int:
    """Every layer on the GPU when this machine has one llama.cpp can use (Metal, CUDA, ...), else
    none. (llama.cpp's own test counts a build with RPC as one that offloads.)"""
    from localspec.backend.devices import local_gpus

    return -1 if local_gpus() else 0
