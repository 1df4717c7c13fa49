"""A command's wall time, exit code and peak resident memory of its whole process tree, sampled from outside it.

    run = run_sampled(["quantgate", "run", ...], env, log_dir)   # stdout.txt and stderr.txt go into log_dir
    run.peak_tree_gb                                             # max over samples of the tree's summed PSS

The tree is the command's process and all its descendants at each sample (psutil, every `interval` seconds):
the Prefect server, DataLoader workers, latency children. Each process counts its proportional set size (PSS):
pages shared between processes (a forked child's copy-on-write pages) count once over the tree, as the kernel
counts them, not once per process as summed RSS would; a peak shorter than the interval can be missed.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from quantgate.memory import process_memory_bytes

GB = 1e9


@dataclass(frozen=True)
class SampledRun:
    exit_code: int
    wall_s: float
    peak_tree_gb: float  # the largest summed resident memory (PSS) of the tree seen in one sample
    peak_process_gb: float  # the largest resident memory (PSS) of one process of the tree
    processes_at_peak: int
    samples: int
    stdout: str
    stderr: str


class TreeSampler(threading.Thread):
    """Samples the resident memory (PSS) of `pid` and its descendants until `stop()`."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        self.root, self.interval, self.stopped = psutil.Process(pid), interval, threading.Event()
        self.peak_tree, self.peak_process, self.processes_at_peak, self.samples = 0, 0, 0, 0

    def sample(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:  # the command has ended
            return
        sizes = []
        for process in tree:
            try:
                sizes.append(process_memory_bytes(process))  # PSS: a forked worker's shared pages count once
            except psutil.Error:  # ended between the listing and the reading
                continue
        self.samples += 1
        if sum(sizes) > self.peak_tree:
            self.peak_tree, self.processes_at_peak = sum(sizes), len(sizes)
        self.peak_process = max([self.peak_process, *sizes])

    def run(self) -> None:
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def run_sampled(command: list[str], env: dict, log_dir: Path, interval: float = 0.1) -> SampledRun:
    """Run `command` to its end with its output in log_dir/stdout.txt and stderr.txt, sampling its tree's resident memory (PSS)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out_file, err_file = log_dir / "stdout.txt", log_dir / "stderr.txt"
    with out_file.open("w") as out, err_file.open("w") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        sampler = TreeSampler(process.pid, interval)
        sampler.start()
        exit_code = process.wait()
        wall = time.perf_counter() - started
        sampler.stop()
    return SampledRun(exit_code, wall, sampler.peak_tree / GB, sampler.peak_process / GB, sampler.processes_at_peak,
                      sampler.samples, out_file.read_text(errors="replace"), err_file.read_text(errors="replace"))
