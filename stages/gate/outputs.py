"""What the gate stage writes: every criterion with its measured value, threshold and verdict."""

from quantgate.gate_record import CRITERIA as CRITERIA  # the store reads these two keys
from quantgate.gate_record import PASSED as PASSED
from quantgate.stages.shared.outputs import StageOutputs

GATE_FILE = "gate.json"
# The criteria against the current release, judged per runtime on the duel's paired samples; publish judges
# them again if `release` moved meanwhile. The CER one for text recognition only.
RELEASE_REGRESSION = "release_regression_pts"
RELEASE_CER_INCREASE = "release_cer_increase_pts"
RELEASE_CRITERIA = (RELEASE_REGRESSION, RELEASE_CER_INCREASE)
RELEASE_DUEL = "release_duel"  # the record's summary of the duel: release version, paired samples, numbers per runtime

OUTPUTS = StageOutputs(
    stage="gate",
    description="the release policy applied to the evaluation, its provenance, the duel with the release and the search",
    files=(GATE_FILE,),
    metrics=(PASSED, CRITERIA, RELEASE_DUEL),
)
