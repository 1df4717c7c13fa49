"""Loss-scaler accounting: one row per step, a summary for the manifest, and the skipped-step limit.

The reference advice for AMP is to watch how often the loss scaler skips steps: a few skips
while dynamic scaling finds its level are normal, many mean the scale starts too high or the
model itself produces inf/NaN. The run fails as soon as the skipped share of all planned
steps can no longer stay under `train.amp.max_skipped_ratio`.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from quantgate.config import TrainConfig
from quantgate.stages.train.errors import TooManySkippedSteps

STEP_COLUMNS = ("step", "epoch", "loss", "loss_scale", "skipped", "skipped_total",
                "grad_norm", "grad_norm_clipped", "learning_rate")


@dataclass(frozen=True)
class StepRow:
    """One training step as written to steps.csv; loss_scale is the scale the step's loss was multiplied by."""

    step: int
    epoch: int
    loss: float
    loss_scale: float
    skipped: int
    skipped_total: int
    grad_norm: float
    grad_norm_clipped: float
    learning_rate: float

    def as_tuple(self) -> tuple:
        return astuple(self)

    @classmethod
    def from_csv(cls, row: dict[str, str]) -> "StepRow":
        ints = {"step", "epoch", "skipped", "skipped_total"}
        return cls(**{key: (int(row[key]) if key in ints else float(row[key])) for key in STEP_COLUMNS})


class ScalerAccounting:
    """Collects the step rows (including those of a resumed run's earlier epochs) and enforces the limit."""

    def __init__(self, config: TrainConfig, planned_steps: int, scaler_enabled: bool, rows: list[StepRow] = ()):
        self.config = config
        self.planned_steps = planned_steps
        self.scaler_enabled = scaler_enabled
        self.rows: list[StepRow] = list(rows)

    @property
    def skipped_total(self) -> int:
        return self.rows[-1].skipped_total if self.rows else 0

    def record(self, step: int, epoch: int, loss: float, loss_scale: float, skipped: bool,
               grad_norm: float, grad_norm_clipped: float) -> None:
        """Add one step's row, then fail if the skipped steps already exceed the limit for the whole run.

        Raises:
            TooManySkippedSteps: more than max_skipped_ratio x planned steps were skipped.
        """
        self.rows.append(StepRow(step, epoch, loss, loss_scale, int(skipped), self.skipped_total + int(skipped),
                                 grad_norm, grad_norm_clipped, self.config.learning_rate))
        if self.skipped_total > self.config.amp.max_skipped_ratio * self.planned_steps:
            raise TooManySkippedSteps(self._too_many_message())

    def _too_many_message(self) -> str:
        amp, overflow = self.config.amp, [row.step for row in self.rows if row.skipped]
        where = (f"the loss scale fell to {min(row.loss_scale for row in self.rows):g}; "
                 f"lower train.amp.init_loss_scaling (now {amp.init_loss_scaling:g}), "
                 if self.scaler_enabled else "the GradScaler is disabled on this device, so the gradients themselves "
                 "were inf/NaN; ")
        return (
            f"{self.skipped_total} of {self.planned_steps} planned training steps were skipped for inf/NaN "
            f"gradients (first at step {overflow[0]}), more than train.amp.max_skipped_ratio="
            f"{amp.max_skipped_ratio:g} allows; {where}check the model and the data for inf/NaN, "
            f"lower train.learning_rate (now {self.config.learning_rate:g}) or set train.grad_clip_norm"
        )

    def summary(self, final_scale: float) -> dict:
        """What the manifest says about loss scaling; `final_scale` is the scale in force after the last update."""
        scales = [row.loss_scale for row in self.rows]
        overflow = [row.step for row in self.rows if row.skipped]
        clipped = [row for row in self.rows if row.grad_norm_clipped < row.grad_norm]
        note = (
            "dynamic loss scaling by paddle.amp.GradScaler; skipped = a gradient was inf/NaN after unscaling"
            if self.scaler_enabled else
            "GradScaler disabled on this device: gradients were not scaled (loss_scale 1.0 means no scaling); "
            "skipped = the train stage skipped the update because a gradient was inf/NaN"
        )
        return {
            "scaler_enabled": self.scaler_enabled,
            "initial_scale": scales[0] if scales else None,
            "final_scale": final_scale,
            "min_scale": min([*scales, final_scale]),
            "steps": len(self.rows),
            "skipped_steps": self.skipped_total,
            "skipped_ratio": self.skipped_total / len(self.rows) if self.rows else 0.0,
            "max_skipped_ratio": self.config.amp.max_skipped_ratio,
            "first_overflow_step": overflow[0] if overflow else None,
            "last_overflow_step": overflow[-1] if overflow else None,
            "grad_clip_norm": self.config.grad_clip_norm,
            "clipped_steps": len(clipped),
            "note": note,
        }
