"""Locks that also hold on NFS: every flock is taken on a descriptor opened read-write (flock(2):
an exclusive lock on NFS needs a file open for writing), and two processes still exclude each other."""

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from quantgate.artifacts import locks
from quantgate.artifacts.fsck import check_store


def flock_modes() -> dict[int, str]:
    """{fd: its access mode} for every descriptor of this process that holds an flock (from /proc/locks)."""
    pid = str(os.getpid())
    held = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "FLOCK" in fields and pid in fields:
            major, minor, inode = fields[fields.index(pid) + 1].split(":")
            held.add((int(major, 16), int(minor, 16), int(inode)))
    modes = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino) in held:
            access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            modes[fd] = {os.O_RDONLY: "O_RDONLY", os.O_WRONLY: "O_WRONLY", os.O_RDWR: "O_RDWR"}[access]
    return modes


def test_every_held_lock_is_on_a_descriptor_opened_read_write(store):
    version = store.create_version("m")
    with store.hold_version(version):
        with store.write_stage(version, "train", config={}, inputs={}) as writer:
            (writer.dir / "w.bin").write_bytes(b"w")
            modes = flock_modes()
            print(modes)
            assert len(modes) == 2 and set(modes.values()) == {"O_RDWR"}  # the version's and the staging folder's
        with store.cache("kind").fill("d1") as folder:
            (folder / "x.bin").write_bytes(b"x")
            assert set(flock_modes().values()) == {"O_RDWR"} and len(flock_modes()) == 2
    assert flock_modes() == {}
    assert [p.kind for p in check_store(store)] == ["incomplete-version"]  # no lock file left behind


_HOLD = """
import pathlib, sys, time
from quantgate.artifacts import ArtifactStore
store = ArtifactStore(sys.argv[1])
version = store.version("m", "v1")
with store.hold_version(version):
    pathlib.Path(sys.argv[2]).write_text("held")
    while not pathlib.Path(sys.argv[3]).exists():
        time.sleep(0.01)
"""


def test_two_processes_still_exclude_each_other(store, tmp_path):
    version = store.create_version("m")
    held, done = tmp_path / "held", tmp_path / "done"
    child = subprocess.Popen([sys.executable, "-c", _HOLD, str(store.root), str(held), str(done)])
    try:
        deadline = time.monotonic() + 60
        while not held.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert locks.is_held(Path(version.path))
        assert locks.hold(Path(version.path), blocking=False) is None
    finally:
        done.write_text("")
        assert child.wait(timeout=60) == 0
    assert not locks.is_held(Path(version.path))
    mine = locks.hold(Path(version.path), blocking=False)
    assert mine is not None
    locks.release(mine)


_TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(7)
"""


def test_lock_file_keeps_its_meaning_for_callers(tmp_path):
    path = tmp_path / ".lock"
    with locks.lock_file(path):
        assert set(flock_modes().values()) == {"O_RDWR"}
        child = subprocess.run([sys.executable, "-c", _TRY_LOCK, str(path)])
        assert child.returncode == 7  # another process cannot take it meanwhile
    assert path.is_file()  # a fixed-name lock file stays: others may be waiting on it
