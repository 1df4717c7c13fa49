"""What the gate stage writes: every criterion with its measured value, threshold and verdict."""

from quantgate.stages.shared.outputs import StageOutputs

GATE_FILE = "gate.json"

PASSED = "passed"
CRITERIA = "criteria"
RELEASE_REGRESSION = "release_regression_pts"  # the criterion publish re-judges if `release` moved meanwhile

OUTPUTS = StageOutputs(
    stage="gate",
    description="the release policy applied to the evaluation, its provenance, the release baseline and the search",
    files=(GATE_FILE,),
    metrics=(PASSED, CRITERIA),
)
