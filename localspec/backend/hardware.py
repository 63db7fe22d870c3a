"""Facts about this machine that decide thread counts and GPU offload."""

from __future__ import annotations

import os
import platform
import subprocess
import time
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


def total_memory_bytes() -> int | None:
    """The machine's physical memory, in each system's own way; None where it cannot be read."""
    if platform.system() == "Windows":
        return _windows_total_memory()
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _windows_total_memory() -> int | None:
    import ctypes

    class MemoryStatusEx(ctypes.Structure):  # MEMORYSTATUSEX, sysinfoapi.h
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong)] + [
            (name, ctypes.c_ulonglong)
            for name in (
                "ullTotalPhys",
                "ullAvailPhys",
                "ullTotalPageFile",
                "ullAvailPageFile",
                "ullTotalVirtual",
                "ullAvailVirtual",
                "ullAvailExtendedVirtual",
            )
        ]

    status = MemoryStatusEx(dwLength=ctypes.sizeof(MemoryStatusEx))
    try:
        ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None
    return int(status.ullTotalPhys) if ok else None


def default_gpu_layers() -> int:
    """Every layer on the GPU when this machine has one llama.cpp can use (Metal, CUDA, ...), else
    none. (llama.cpp's own test counts a build with RPC as one that offloads.)"""
    from localspec.backend.devices import local_gpus

    return -1 if local_gpus() else 0


class OtherLoad:
    """How many cores other processes kept busy since the last reading: the machine's busy time
    (Linux /proc/stat) less this process's own CPU time. None where that cannot be read (other
    systems have no /proc/stat, and no clock ticks to count it in)."""

    def __init__(self, stat: Path | None = None) -> None:
        self.stat = stat or (Path("/proc/stat") if platform.system() == "Linux" else None)
        self._last = self._read()

    def _read(self) -> tuple[int, int, float] | None:
        if self.stat is None:
            return None
        try:
            ticks = [int(v) for v in self.stat.read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        if len(ticks) < 4:
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and waiting on I/O
        return sum(ticks), idle, time.process_time()

    def __call__(self) -> float | None:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[0] <= last[0]:
            return None
        per_second = os.sysconf("SC_CLK_TCK")
        busy = (now[0] - last[0] - (now[1] - last[1])) / per_second
        wall = (now[0] - last[0]) / per_second / (os.cpu_count() or 1)
        return max(busy - (now[2] - last[2]), 0.0) / wall


def available_memory_bytes() -> int | None:
    """Memory a new allocation may take without pushing others out: Linux's MemAvailable (free,
    plus caches it can drop), elsewhere the machine's total (what may be had with others closed)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return total_memory_bytes()
