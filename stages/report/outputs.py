"""What the report stage writes: a markdown report and its pictures.

Every report writes `files`; which pictures come with them depends on the task (`PLOTS`) and on what
the run measured (`optional_files`): no gallery when INT8 and FP32 agree on every test sample, no
runtimes plot for a version evaluated in one runtime only, no trade-off plot without a search.
"""

from quantgate.stages.shared.outputs import StageOutputs
from quantgate.tasks import CLASSIFICATION, TEXT_RECOGNITION

REPORT_FILE = "report.md"
TRAINING_PLOT = "training.png"
PER_CLASS_PLOT = "per_class.png"  # classification only: top-1 per class makes no sense for text lines
CONFUSION_PLOT = "confusion.png"  # classification only
DISAGREEMENTS_PLOT = "disagreements.png"  # the test samples where INT8 and FP32 disagree, when there are any
RUNTIMES_PLOT = "runtimes.png"  # only for a version evaluated in more than one runtime
RELEASE_DUEL_PLOT = "vs_release.png"  # the paired samples where the release and this version disagree, if any
TRADE_OFF_PLOT = "trade_off.png"  # the INT8 search's accuracy drop against speed-up; none for strategy 'single'

# The pictures each task draws whenever it runs (besides TRAINING_PLOT, which every report draws).
PLOTS = {
    CLASSIFICATION: (PER_CLASS_PLOT, CONFUSION_PLOT),
    TEXT_RECOGNITION: (),
}
GALLERY_SIZE = 24  # at most this many disagreeing test samples are drawn and listed

FONT = "font"  # metric: the font the pictures' strings were drawn with, or None when they are not drawn
DISAGREEMENTS = "disagreements"  # metric: test samples whose FP32 and INT8 predictions differ

OUTPUTS = StageOutputs(
    stage="report",
    description="report.md with the run's numbers, the gate's verdicts, the INT8 vs FP32 disagreements and PNG plots",
    files=(REPORT_FILE, TRAINING_PLOT),
    metrics=("report_file", "plots", FONT, DISAGREEMENTS),
    optional_files=(PER_CLASS_PLOT, CONFUSION_PLOT, DISAGREEMENTS_PLOT, RUNTIMES_PLOT, RELEASE_DUEL_PLOT,
                    TRADE_OFF_PLOT),
)
