"""What the OCR system's stages write: the components it is made of, what each system read on each page, and the
metric keys the gate, the record and the report read."""

from quantgate.stages.shared.outputs import StageOutputs

SYSTEM_FILE = "system.json"  # the system stage: {"components": {detector, classifier, recognizer}, drop_score, ...}
READS_FILE = "reads.json"  # the evaluate stage: {runtime: {system: [[{"points", "text", "score"}] per page]}}
PAGE_IDS = "page_ids"  # in reads.json: each test page's sha256, in test order (pairs pages with the release's)

TASK_NAME = "ocr_system"
ACCURACY_NAME = "end-to-end line accuracy"
E2E_DROP = "e2e_line_drop_pts"  # all-FP32 minus all-INT8 end-to-end line accuracy, points
SYSTEMS = "systems"  # per runtime: every system's scores, latency and comparison with all-FP32

OUTPUTS = StageOutputs(
    stage="system",
    description="the stored, passed versions an OCR system is made of (detector, classifier, recognizer)",
    files=(SYSTEM_FILE,),
    metrics=("components",),
)
EVALUATE_OUTPUTS = StageOutputs(
    stage="evaluate",
    description="every FP32/INT8 mix of the OCR system read on the pages, in every runtime, end to end",
    files=(READS_FILE,),
)
