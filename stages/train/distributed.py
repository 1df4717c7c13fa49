"""Data-parallel training on N processes with `python -m paddle.distributed.launch`.

The train stage calls `train_data_parallel`, which launches this module once per process
(`python -m quantgate.stages.train.distributed`). Every rank first checks that it reads the same data
as the launching process (the data stage's digest), then trains a `paddle.DataParallel` copy on its
shard of the train split (DistributedBatchSampler; images decoded by its own DataLoader workers, with
the training augmentation), gradients are all-reduced (gloo on CPU, NCCL on GPUs), and BatchNorm
running statistics, which gradients do not synchronize, are averaged over the ranks at the end. Each
rank writes a sha256 of its final weights; rank 0 also writes the weights and the step records. The
stage then checks that every rank ended with the same weights, so what it ships is what all ranks
agree on, and the rest of the pipeline is unchanged.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist

from quantgate.config import TrainConfig
from quantgate.errors import StageError
from quantgate.lifetime import die_with_parent, dies_with_us
from quantgate.samples.reading import StoredData, open_data
from quantgate.stages.shared.digests import arrays_sha256 as weights_sha256  # the ranks' weights compared by it
from quantgate.stages.train import amp
from quantgate.stages.train.errors import DistributedTrainingFailed, RankDataMismatch
from quantgate.stages.train.grad_step import BufferSnapshot, apply_update
from quantgate.stages.train.losses import TaskLoss, loss_for
from quantgate.stages.train.op_precision import op_precision_record, operator_stats
from quantgate.stages.train.outputs import (
    DISTRIBUTED,
    LAUNCH_DIR,
    OP_PRECISION_FILE,
    REFERENCE_LOGITS_FILE,
    STEPS_FILE,
    WEIGHTS_FILE,
)
from quantgate.stages.train.parts import (
    DivergenceWatch,
    TrainResult,
    build_training_model,
    check_finite,
    data_records,
    model_records,
    reference_logits,
)
from quantgate.stages.train.scaler_accounting import STEP_COLUMNS, ScalerAccounting

LOG_TAIL_LINES = 40
# "quantgate.stages.train.errors.TrainingDiverged: ..." (or a library's, "quantgate.models.errors.ModelError: ...")
# in a rank's traceback: the module, then the class.
QUANTGATE_ERROR = re.compile(r"(quantgate\.[\w.]+?)\.([A-Z]\w+): ")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _failure_report(nproc: int, results: dict, launch_dir: Path, finished: subprocess.CompletedProcess) -> str:
    """Which ranks failed, with the tail of the log of each rank that raised (the launcher stops the others)."""
    unfinished = [rank for rank in range(nproc) if rank not in results] or list(range(nproc))
    logs = {rank: launch_dir / "logs" / f"workerlog.{rank}" for rank in unfinished}
    launcher_log = finished.stdout + finished.stderr
    # The cause is the rank that raised a quantgate error; else the one the launcher saw fail first.
    # The others then fail too (their collective calls lose a peer) or are terminated by the launcher.
    raised = [rank for rank in unfinished if QUANTGATE_ERROR.search(_log_tail(logs[rank]))]
    reported = {int(rank) for rank in re.findall(r"Container rank (\d+) status failed", launcher_log)}
    shown = raised or [rank for rank in unfinished if rank in reported] or unfinished
    stopped = sorted(set(unfinished) - set(shown))
    tails = "\n".join(f"--- rank {rank} ({logs[rank]}), last lines:\n{_log_tail(logs[rank])}" for rank in shown)
    launcher_tail = "\n".join(launcher_log.splitlines()[-10:])
    return (
        f"data-parallel training on {nproc} processes failed (launcher exit {finished.returncode}): rank(s) {shown} "
        "failed" + (f", rank(s) {stopped} stopped with them" if stopped else "")
        + f"; full logs in {launch_dir / 'logs'}\n{tails}\n--- launcher, last lines:\n{launcher_tail}"
    )


def _rank_error_class(report: str) -> type[StageError]:
    """The quantgate error a rank raised (e.g. TrainingDiverged, ModelError), so N processes fail like one;
    DistributedTrainingFailed when the rank died of something else."""
    for module, name in QUANTGATE_ERROR.findall(report):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(found, type) and issubclass(found, StageError):
            return found
    return DistributedTrainingFailed


def launch_command(nproc: int, log_dir: Path, worker_args: list[str]) -> list[str]:
    """The paddle.distributed.launch command line: one process per device on GPUs, gloo processes on CPU."""
    return [
        sys.executable, "-m", "paddle.distributed.launch",
        "--nproc_per_node", str(nproc),
        "--log_dir", str(log_dir),
        "--start_port", str(_free_port()),  # a free port, so concurrent runs on one machine do not collide
        sys.executable, "-m", "quantgate.stages.train.distributed", *worker_args,
    ]


def train_data_parallel(config: TrainConfig, data_dir: Path, out_dir: Path, num_workers: int = 0):
    """Launch `config.nproc` training processes, each reading `data_dir` with `num_workers` DataLoader workers,
    check their weights agree, and return rank 0's result.

    Raises:
        RankDataMismatch: a rank sees other data in `data_dir` than this process.
        DistributedTrainingFailed: the launcher or a rank failed (the error carries the tail of its log),
            or the ranks ended with different weights.
        TrainingDiverged, ModelError, ...: a rank raised that quantgate error (same message and log tail).
    """
    out_dir = Path(out_dir)
    data = open_data(data_dir)
    launch_dir = out_dir / LAUNCH_DIR
    launch_dir.mkdir()
    config_file = launch_dir / "train_config.json"
    config_file.write_text(json.dumps(config.model_dump(mode="json"), sort_keys=True))
    worker_args = ["--config", str(config_file), "--data", str(Path(data_dir).resolve()), "--data-digest",
                   data.digest, "--num-workers", str(num_workers), "--out", str(out_dir)]
    command = launch_command(config.nproc, launch_dir / "logs", worker_args)
    started = time.perf_counter()
    finished = subprocess.run(dies_with_us(command), capture_output=True, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seconds = time.perf_counter() - started
    (launch_dir / "launcher.log").write_text(finished.stdout + finished.stderr)

    results = {}
    for rank in range(config.nproc):
        result_file = launch_dir / f"rank{rank}.json"
        if result_file.exists():
            results[rank] = json.loads(result_file.read_text())
    if finished.returncode != 0 or len(results) != config.nproc:
        # A failed stage's output folder is discarded; the logs are kept outside it for the post-mortem.
        kept = Path(tempfile.mkdtemp(prefix="quantgate-train-launch-"))
        shutil.copytree(launch_dir, kept, dirs_exist_ok=True)
        report = _failure_report(config.nproc, results, kept, finished)
        raise _rank_error_class(report)(report)
    digests = {str(rank): results[rank]["weights_sha256"] for rank in sorted(results)}
    if len(set(digests.values())) != 1:
        raise DistributedTrainingFailed(
            f"the {config.nproc} ranks ended with different weights ({digests}); the all-reduce did not keep the "
            "replicas in step, so no weights are shipped"
        )

    with np.load(out_dir / WEIGHTS_FILE, allow_pickle=False) as stored:
        weights = {name: stored[name] for name in stored.files}
    if weights_sha256(weights) != digests["0"]:
        raise DistributedTrainingFailed(f"{WEIGHTS_FILE} does not match the digest rank 0 reported")
    np.save(out_dir / REFERENCE_LOGITS_FILE,
            reference_logits(weights, data, config.architecture, num_workers, config.neck))
    rank0 = results[0]
    metrics = {
        **rank0["metrics"],
        "architecture": config.architecture,
        **model_records(config, loss_for(data.spec)),
        "num_classes": data.num_classes,
        "input_shape": list(data.input_shape),
        "train_seconds": seconds,  # launch included: process start, rendezvous, reading and training
        "samples_per_second": data.size("train") * config.epochs / seconds,
        **data_records(data, num_workers),  # per rank: each rank runs num_workers DataLoader workers
        DISTRIBUTED: {
            "world_size": rank0["world_size"],
            "backend": rank0["backend"],
            "launcher": "python -m paddle.distributed.launch",
            "rank_weights_sha256": digests,
            "ranks_identical": True,
            "running_statistics_averaged": rank0["running_statistics_averaged"],
            "batch_size_per_rank": config.batch_size,
            "logs": f"{LAUNCH_DIR}/logs",
        },
    }
    return TrainResult(WEIGHTS_FILE, STEPS_FILE, REFERENCE_LOGITS_FILE, metrics)


class _Rows:
    """The train split as DistributedBatchSampler sees it: only its length (fetch reads the rows)."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


def check_same_data(data: StoredData, expected_digest: str, rank: int) -> None:
    """Refuse to train a rank on other data than the launching process opened.

    Raises:
        RankDataMismatch: the data stage's record in this rank's `data.folder` differs.
    """
    if data.digest != expected_digest:
        raise RankDataMismatch(
            f"rank {rank} reads other data than the process that launched it: the data folder {data.folder} has "
            f"digest {data.digest} on this rank, {expected_digest} where the run started; every machine must see "
            "the same data folder and the same image files (mount or copy them identically), then run again"
        )


def _average_running_statistics(model, world_size: int) -> int:
    """Average the state that gradients never reach over the ranks: BatchNorm's running mean and variance
    (Paddle keeps them as non-trainable parameters) and any floating-point buffer. Returns how many."""
    averaged = 0
    for tensor in model.state_dict().values():
        if tensor.is_floating_point() and (tensor.stop_gradient or not getattr(tensor, "trainable", False)):
            dist.all_reduce(tensor)
            tensor.set_value(tensor / world_size)
            averaged += 1
    return averaged


@dataclass
class _Rank:
    """One rank's share of the training: its replica of the model, wrapped for the all-reduce, and its shard."""

    config: TrainConfig
    data: StoredData
    num_workers: int
    rank: int
    world_size: int
    model: paddle.nn.Layer
    parallel: paddle.DataParallel
    optimizer: paddle.optimizer.Optimizer
    scaler: paddle.amp.GradScaler
    watch: DivergenceWatch
    sampler: paddle.io.DistributedBatchSampler
    accounting: ScalerAccounting
    trainable: list
    probe: amp.OutputDtypeProbe
    loss: TaskLoss


def _set_up_rank(config: TrainConfig, data_dir: Path, data_digest: str, num_workers: int) -> _Rank:
    """Join the process group, check this rank's data, and build its model, optimizer, loss scaler and
    shard sampler."""
    dist.init_parallel_env()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = open_data(data_dir)
    check_same_data(data, data_digest, rank)
    paddle.seed(config.seed)  # same initial weights everywhere; DataParallel also broadcasts rank 0's
    loss = loss_for(data.spec)
    model = build_training_model(config, data, loss)
    optimizer = paddle.optimizer.Adam(learning_rate=config.learning_rate, parameters=model.parameters())
    model, optimizer = amp.decorate(model, optimizer, config.amp)
    scaler = amp.grad_scaler(config.amp)
    watch = DivergenceWatch(config.max_nonfinite_steps, config.learning_rate)
    sampler = paddle.io.DistributedBatchSampler(
        _Rows(data.size("train")), batch_size=config.batch_size, num_replicas=world_size, rank=rank, shuffle=True
    )
    accounting = ScalerAccounting(config, config.epochs * len(sampler), scaler.is_enable())
    trainable = [param for param in model.parameters() if not param.stop_gradient]
    probe = amp.OutputDtypeProbe(model)
    parallel = paddle.DataParallel(model)
    parallel.train()
    return _Rank(config, data, num_workers, rank, world_size, model, parallel, optimizer, scaler, watch, sampler,
                 accounting, trainable, probe, loss)


def _train_rank(worker: _Rank) -> tuple[int, dict]:
    """Every epoch on this rank's shard; returns the steps taken and the operators of the first step."""
    config, model = worker.config, worker.model
    scaler, optimizer = worker.scaler, worker.optimizer
    step, ops = 0, {}
    for epoch in range(1, config.epochs + 1):
        worker.sampler.set_epoch(config.seed * 100_003 + epoch)  # the same permutation on every rank, new each epoch
        for images, labels in worker.data.fetch("train", worker.sampler, worker.num_workers, augment=True,
                                                epoch=epoch):
            images, labels = paddle.to_tensor(images), paddle.to_tensor(labels)
            before = BufferSnapshot(model)
            with operator_stats() if step == 0 else nullcontext() as counted:
                with amp.autocast(config.amp, worker.loss.float32_ops):
                    loss = worker.loss(worker.parallel(images), labels)
            if step == 0:
                worker.probe.remove()
                ops = counted
            scale_used = amp.loss_scale(scaler)
            scaler.scale(loss).backward()  # DataParallel all-reduces the gradients here
            outcome = apply_update(scaler, optimizer, worker.trainable, config.grad_clip_norm, before)
            optimizer.clear_grad()
            step += 1
            loss_value = float(loss.astype("float32"))  # this rank's shard
            worker.accounting.record(step, epoch, loss_value, scale_used, outcome.skipped,
                                     outcome.grad_norm, outcome.grad_norm_clipped)
            worker.watch.observe(step, loss_value)
    return step, ops


def _write_rank0_outputs(worker: _Rank, weights: dict[str, np.ndarray], weights_source: str, steps: int, ops: dict,
                         out_dir: Path) -> dict:
    """Rank 0 writes the weights, step records and operator precisions; returns its metrics for the stage."""
    config, scaler, accounting = worker.config, worker.scaler, worker.accounting
    record = amp.amp_record(config.amp, scaler, worker.probe, worker.loss.float32_ops)
    np.savez(out_dir / WEIGHTS_FILE, **weights)
    with open(out_dir / STEPS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        writer.writerows(row.as_tuple() for row in accounting.rows)
    (out_dir / OP_PRECISION_FILE).write_text(json.dumps(
        op_precision_record(ops, record.effective, record.reason, record.device, record.task_black_list),
        indent=2, sort_keys=True))
    final_losses = [row.loss for row in accounting.rows[-len(worker.sampler):]]
    return {
        "steps": steps,
        "final_epoch_loss_mean": float(np.mean(final_losses)),  # rank 0's shard
        "loss_scale_final": amp.loss_scale(scaler),
        "scaler": accounting.summary(amp.loss_scale(scaler)),
        "resumed_from_epoch": None,
        "epochs_trained_in_this_run": config.epochs,
        "amp": {**record.as_dict(), "weights_source": weights_source},
    }


def run_worker(config: TrainConfig, data_dir: Path, data_digest: str, num_workers: int, out_dir: Path) -> None:
    """One rank: train on its shard, then write its weights digest (and, on rank 0, the weights and steps).

    The step is the single-process one (`grad_step.apply_update`: unscale, skip on inf/NaN, clip,
    step); the gradients it sees are already all-reduced, so every rank takes the same decision.
    """
    worker = _set_up_rank(config, data_dir, data_digest, num_workers)
    steps, ops = _train_rank(worker)
    averaged = _average_running_statistics(worker.model, worker.world_size)

    weights, weights_source = amp.float32_state(worker.model, worker.optimizer)
    check_finite(weights, config.learning_rate)
    result = {
        "rank": worker.rank,
        "world_size": worker.world_size,
        "backend": "nccl" if paddle.is_compiled_with_cuda() and paddle.get_device().startswith("gpu") else "gloo",
        "weights_sha256": weights_sha256(weights),
        "running_statistics_averaged": averaged,
    }
    if worker.rank == 0:
        result["metrics"] = _write_rank0_outputs(worker, weights, weights_source, steps, ops, out_dir)
    # Written last and atomically: its presence means this rank finished.
    target = out_dir / LAUNCH_DIR / f"rank{worker.rank}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(result, sort_keys=True))
    os.replace(partial, target)


def main(argv: list[str] | None = None) -> None:
    die_with_parent()  # a rank outlives neither its launcher nor, through it, the run
    parser = argparse.ArgumentParser(description="one rank of quantgate's data-parallel training")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="the data stage's folder")
    parser.add_argument("--data-digest", required=True, help="its digest in the launching process")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes of this rank")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    config = TrainConfig.model_validate(json.loads(args.config.read_text()))
    run_worker(config, args.data, args.data_digest, args.num_workers, args.out)


if __name__ == "__main__":
    main()
