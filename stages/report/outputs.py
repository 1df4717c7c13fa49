"""What the report stage writes: a markdown report and its plots."""

from quantgate.stages.shared.outputs import StageOutputs

REPORT_FILE = "report.md"
TRAINING_PLOT = "training.png"
PER_CLASS_PLOT = "per_class.png"
RUNTIMES_PLOT = "runtimes.png"  # only for a version evaluated in more than one runtime
PLOTS = (TRAINING_PLOT, PER_CLASS_PLOT)

OUTPUTS = StageOutputs(
    stage="report",
    description="report.md with the run's numbers, the gate's verdicts and PNG plots",
    files=(REPORT_FILE, *PLOTS),
    metrics=("report_file", "plots"),
    optional_files=(RUNTIMES_PLOT,),
)
