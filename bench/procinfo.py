"""Linux ``/proc`` readings: resident memory and CPU time of a process tree, machine CPU use.

Every function tolerates processes that exit while being read (they simply stop counting).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """``pid`` and every live descendant of it (for gateways that fork worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, ()))
    return tree


def rss_mb(pids: Iterable[int]) -> float:
    """Current resident set size (VmRSS), summed, in MiB."""
    return sum(_status_kb(p, "VmRSS") for p in pids) / 1024.0


def peak_rss_mb(pids: Iterable[int]) -> float:
    """Peak resident set size (VmHWM, the kernel's high-water mark), summed, in MiB."""
    return sum(_status_kb(p, "VmHWM") for p in pids) / 1024.0


def machine_busy_seconds() -> float:
    """CPU-seconds spent busy across all cores since boot: user, nice, system, irq and softirq
    (not idle, iowait or hypervisor steal)."""
    with open("/proc/stat", encoding="ascii") as fh:
        parts = fh.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in parts[:7])
    return (user + nice + system + irq + softirq) / CLK_TCK


def process_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` (every thread of it) in clock ticks; ``None`` once it has exited."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])


def all_process_ticks() -> dict[int, tuple[int, str]]:
    """pid -> (utime + stime in clock ticks, command name) for every live process."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        out[int(entry)] = (int(fields[11]) + int(fields[12]), raw[raw.find("(") + 1 : raw.rfind(")")])
    return out


@dataclass(frozen=True)
class CpuSnapshot:
    at: float  # time.perf_counter()
    roles: Mapping[str, frozenset[int]]
    processes: Mapping[int, tuple[int, str]]  # every process: pid -> (ticks, name)
    machine: float


def snapshot(at: float, roles: Mapping[str, Iterable[int]]) -> CpuSnapshot:
    """Every process's CPU time; the roles' processes are read first, right after ``at`` was taken,
    so their readings belong to that moment (the scan of every other process takes milliseconds)."""
    frozen = {role: frozenset(pids) for role, pids in roles.items()}
    first = {pid: process_ticks(pid) for pids in frozen.values() for pid in pids}
    processes = all_process_ticks()
    for pid, ticks in first.items():
        if ticks is not None:
            processes[pid] = (ticks, processes.get(pid, (0, "?"))[1])
    return CpuSnapshot(at, frozen, processes, machine_busy_seconds())


def role_cpu_seconds(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """User + system CPU seconds each role's processes used between the two snapshots (only
    processes alive at both count: the targets measured here live across the whole window)."""
    out: dict[str, float] = {}
    for role, pids in after.roles.items():
        ticks = 0
        for pid in pids | before.roles.get(role, frozenset()):
            if pid in before.processes and pid in after.processes:
                ticks += max(0, after.processes[pid][0] - before.processes[pid][0])
        out[role] = ticks / CLK_TCK
    return out


@dataclass(frozen=True)
class CpuShares:
    """CPU use between two snapshots, in percent of one core."""

    per_role: dict[str, float]
    other_processes: float  # processes outside every role (e.g. other people's test runs)
    kernel: float  # busy CPU charged to no process: mostly loopback softirq work
    machine: float  # all busy CPU (at most 100% x cores)
    top_others: list[tuple[str, float]]  # the busiest processes outside the roles

    def as_dict(self) -> dict[str, float]:
        return {
            **self.per_role,
            "other procs": self.other_processes,
            "kernel": self.kernel,
            "machine": self.machine,
        }


def shares(before: CpuSnapshot, after: CpuSnapshot) -> CpuShares:
    wall = after.at - before.at
    if wall <= 0:
        return CpuShares({}, 0.0, 0.0, 0.0, [])
    scale = 100.0 / (CLK_TCK * wall)

    def delta(pid: int) -> int:
        ticks = after.processes.get(pid, (0, ""))[0] - before.processes.get(pid, (0, ""))[0]
        return max(0, ticks)

    in_roles: set[int] = set()
    per_role: dict[str, float] = {}
    for role, pids in after.roles.items():
        in_roles |= pids
        per_role[role] = scale * sum(delta(p) for p in pids)
    others = sorted(
        ((delta(p) * scale, name) for p, (_, name) in after.processes.items() if p not in in_roles),
        reverse=True,
    )
    other_total = sum(pct for pct, _ in others)
    machine = 100.0 * (after.machine - before.machine) / wall
    kernel = max(0.0, machine - sum(per_role.values()) - other_total)
    top = [(name, pct) for pct, name in others[:3] if pct >= 1.0]
    return CpuShares(per_role, other_total, kernel, machine, top)
