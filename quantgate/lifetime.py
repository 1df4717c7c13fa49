"""Every process a run starts dies with it, however the run ends (a kill, the OOM killer, a cancellation).

Two mechanisms, because neither covers everything alone:

* `die_with_parent`: a child asks the Linux kernel to SIGKILL it when its parent dies
  (prctl PR_SET_PDEATHSIG), then re-checks its parent, since the parent may have died between the
  fork and the prctl. It is instantaneous and cannot be missed, but only a child that runs our code can
  ask for it: commands we start (`dies_with_us`: the latency process, the training launcher), the
  training ranks, Paddle's DataLoader workers (`DataLoaderWorkerInit`).
  Caveat (prctl(2)): the "parent" is the *thread* that forked the child, so a child forked by a thread
  that exits before it would be killed early. Every child here is started by, and waited for in, the one
  call that needs it (a subprocess.run, a DataLoader loop), so its thread outlives it.

* The keeper (`keep_children`, quantgate/keeper.py): one small process per run that, once the run's
  process is gone, ends (SIGTERM, then SIGKILL) the run's descendants it saw while polling the tree and
  every process whose environment carries the run's tag (RUN_TAG_ENV, set before anything is started, so
  every program started afterwards inherits it, whoever started it). It covers what we cannot hook:
  Prefect's temporary server (Prefect starts uvicorn itself), anything a library starts, and a worker's
  flow-run process killed by a cancellation or a pool's timeout.

Linux only; elsewhere these do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import secrets
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
KEEPER_MODULE = "quantgate.keeper"
RUN_TAG_ENV = "QUANTGATE_RUN_TAG"  # every program a run starts carries it; the keeper ends them by it
# The pid of a command started through `dies_with_us`, for its own children's `die_with_parent()` re-check.
WRAPPED_PID_ENV = "QUANTGATE_DIES_WITH"
# A worker's flow-run process has this in its environment (set by Prefect's runner for `prefect.engine`).
FLOW_RUN_ENV = "PREFECT__FLOW_RUN_ID"

_keeper: subprocess.Popen | None = None
_keeper_lock = threading.Lock()


def die_with_parent(expected_parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has.

    `expected_parent`: the pid that started us (captured before the fork/spawn); without it, the command
    started through `dies_with_us` whose child this is (WRAPPED_PID_ENV: paddle.distributed.launch's ranks),
    if any. Call it first thing in a child.
    """
    if not sys.platform.startswith("linux"):
        return
    if expected_parent is None and os.environ.get(WRAPPED_PID_ENV, "").isdigit():
        expected_parent = int(os.environ[WRAPPED_PID_ENV])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the keeper still ends this process after its run
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)  # the parent died before the prctl took effect: nobody is left to read our output


def dies_with_us(command: list[str]) -> list[str]:
    """`command` run through a tiny wrapper that sets PR_SET_PDEATHSIG (kept across exec), then execs it.

    Instead of a `preexec_fn`, which runs between fork and exec and is unsafe while other threads (Paddle's,
    Prefect's) may hold locks. Start the command from the thread that waits for it (see the module's caveat).
    """
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, "-m", __name__, str(os.getpid()), *command]


class DataLoaderWorkerInit:
    """A paddle.io.DataLoader `worker_init_fn`: each worker dies with the process that forked it.

    Paddle's own watchdog checks the parent only between batches, and a worker blocked on a full pipe
    to a dead parent never gets there (such workers outlived killed runs indefinitely).
    """

    def __init__(self) -> None:
        self.parent = os.getpid()

    def __call__(self, worker_id: int) -> None:
        die_with_parent(self.parent)


def keep_children() -> None:
    """Start this process's keeper (once per process): after this process is gone, its descendants are ended.

    Call it in a process that *is* a run (the `quantgate run` command, a worker's flow-run process), not in
    one that merely calls the flow (a test, a notebook), whose other children are none of the run's business.
    """
    global _keeper
    if not sys.platform.startswith("linux"):
        return
    with _keeper_lock:
        if _keeper is not None and _keeper.poll() is None:
            return
        tag = os.environ[RUN_TAG_ENV] = f"{os.getpid()}-{secrets.token_hex(8)}"
        # Its own session: a Ctrl-C or a group signal meant for the run must not end the keeper first. Started
        # from whichever thread: the keeper watches its parent process, not a thread.
        _keeper = subprocess.Popen([sys.executable, "-m", KEEPER_MODULE, str(os.getpid()), tag],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)


def is_flow_run_process() -> bool:
    """Whether this process was started by a Prefect worker or runner for one flow run (`prefect.engine`)."""
    return bool(os.environ.get(FLOW_RUN_ENV))


def _exec_dying_with(argv: list[str]) -> None:
    """`python -m quantgate.lifetime PARENT COMMAND...`: die with PARENT, then become COMMAND."""
    die_with_parent(int(argv[0]))
    os.environ[WRAPPED_PID_ENV] = str(os.getpid())  # the command's pid once exec'd: its children re-check it
    os.execvp(argv[1], argv[1:])


if __name__ == "__main__":
    _exec_dying_with(sys.argv[1:])
