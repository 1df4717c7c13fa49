"""Train stage: AMP training (auto_cast + GradScaler) on 1 or N processes, keeping the float32 master weights."""

from quantgate.stages.shared.lazy import lazy_exports
from quantgate.stages.train.outputs import OUTPUTS as OUTPUTS

__getattr__, __all__ = lazy_exports(__name__, {
    "DistributedTrainingFailed": "errors", "ModelError": "errors", "RankDataMismatch": "errors",
    "ResumeMismatch": "errors", "TooManySkippedSteps": "errors", "TrainingDiverged": "errors", "TrainResult": "loop",
    "train": "loop", "InitWeights": "warm_start", "WarmStartMismatch": "errors", "read_state_dict": "warm_start", "state_fit": "warm_start", "PICKLE_SUFFIX": "warm_start",
    "CheckpointBytes": "checkpoint_state", "read_state": "checkpoint_state", "resume_problems": "checkpoint_state",
})
