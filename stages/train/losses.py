"""The training loss of each task, used by the single-process and the data-parallel training alike.

Classification: cross-entropy of [N, classes] logits against class labels. Text recognition: CTC of
[N, T, C] logits against the label ids padded with the blank (0), computed in float32 whatever
auto_cast chose for the model: the loss sums log-probabilities over every alignment of a line, which
float16 underflows. Its operator (Paddle's `warpctc`) is not on Paddle's AMP black list, so the task
names it (`float32_ops`) and the training adds it to the black list for the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import paddle
import paddle.nn.functional as F

from quantgate.tasks import TEXT_RECOGNITION, task_of
from quantgate.tasks.text import BLANK

CTC_OP = "warpctc"  # the operator paddle.nn.functional.ctc_loss runs


def cross_entropy(logits: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
    """Mean cross-entropy of [N, classes] logits against int64 class labels [N]."""
    return F.cross_entropy(logits, labels)


def ctc(logits: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
    """Mean CTC loss (per label character, then over the batch) of [N, T, C] logits against label ids [N, L]
    padded with the blank; every line uses all T frames, its length is its count of non-blank ids."""
    # Transposed before the cast: under O2 auto_cast a transpose of float32 input would run in float16 again.
    frames = paddle.transpose(logits, [1, 0, 2]).astype("float32")  # [T, N, C], as warpctc takes them
    steps, batch = frames.shape[0], frames.shape[1]
    input_lengths = paddle.full([batch], steps, dtype="int64")
    label_lengths = (labels > BLANK).astype("int64").sum(axis=1)
    return F.ctc_loss(frames, labels.astype("int32"), input_lengths, label_lengths, blank=BLANK, reduction="mean")


@dataclass(frozen=True)
class TaskLoss:
    """A task's loss, and the operators it must run in float32 under AMP."""

    task: str
    float32_ops: tuple[str, ...]

    def __call__(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return ctc(outputs, labels) if self.task == TEXT_RECOGNITION else cross_entropy(outputs, labels)


def loss_for(spec: dict) -> TaskLoss:
    """The loss of the task a data stage's record (`dataset.json`) names.

    Raises:
        ValueError: the record names a task this quantgate does not know.
    """
    name = task_of(spec).name
    return TaskLoss(name, (CTC_OP,) if name == TEXT_RECOGNITION else ())

