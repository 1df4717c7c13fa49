import logging

from quantgate.progress import Progress


def test_progress_logs_first_and_last_step_and_throttles_the_rest(caplog):
    log = logging.getLogger("quantgate.stages.test")
    with caplog.at_level(logging.INFO, logger="quantgate.stages"):
        progress = Progress(log, "calibration batch", 50, every_s=3600)
        for done in range(1, 51):
            progress.step(done, f"loss {1 / done:.2f}")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("calibration batch 1/50: loss 1.00 (")
    assert lines[1].startswith("calibration batch 50/50: loss 0.02 (")


def test_progress_without_throttle_logs_every_step(caplog):
    with caplog.at_level(logging.INFO, logger="quantgate.stages"):
        progress = Progress(logging.getLogger("quantgate.stages.test"), "train epoch", 3)
        for epoch in (1, 2, 3):
            progress.step(epoch)
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "train epoch 1/3", "train epoch 2/3", "train epoch 3/3"]
