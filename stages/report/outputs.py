"""What the report stage writes: a markdown report and its plots."""

from quantgate.stages.shared.outputs import StageOutputs

REPORT_FILE = "report.md"
TRAINING_PLOT = "training.png"
PER_CLASS_PLOT = "per_class.png"
PLOTS = (TRAINING_PLOT, PER_CLASS_PLOT)

OUTPUTS = StageOutputs(
    stage="report",
    description="report.md with the run's numbers, the gate's verdicts and PNG plots",
    files=(REPORT_FILE, *PLOTS),
    metrics=("report_file", "plots"),
)
