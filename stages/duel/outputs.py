"""What the duel stage writes: the current release scored on this version's test samples, paired row by row.

One `paired_<runtime>.npz` per runtime the version is gated on (rows, sample_ids, references, release_pred,
candidate_pred: the candidate's test rows that neither version trained, calibrated or validated on), and the
numbers the gate judges in the manifest.
"""

from __future__ import annotations

from quantgate.stages.shared.outputs import StageOutputs

STAGE = "duel"
PAIRED_KEYS = ("rows", "sample_ids", "references", "release_pred", "candidate_pred")

RELEASE_VERSION = "release_version"
STATUS = "status"  # PAIRED, or INCOMPARABLE with PROBLEM saying why
PAIRED, INCOMPARABLE = "paired", "incomparable"
PROBLEM = "problem"
TASK = "task"
TEST_SAMPLES = "test_samples"  # the candidate's test split
DROPPED_OVERLAP = "dropped_overlap"  # test samples one of the versions trained, calibrated or validated on
DROPPED_SEEN_BY_RELEASE = "dropped_seen_by_release"
DROPPED_SEEN_BY_CANDIDATE = "dropped_seen_by_candidate"
PAIRED_SAMPLES = "paired_samples"
PAIRED_FINGERPRINT = "paired_fingerprint_sha256"  # sha256 of the paired samples' ids, in order
DATA_FINGERPRINT = "data_fingerprint_sha256"  # the candidate's data stage fingerprint
RELEASE_DATA_FINGERPRINT = "release_data_fingerprint_sha256"
CLASSES = "classes"  # classification: {"added": [...], "removed": [...]} when the class set changed
RUNTIMES = "runtimes"  # {runtime: RUNTIME_KEYS}
RELEASE_SCORING_S = "release_scoring_s"  # evaluation time the duel added: running the release (0 when reused)

# Per runtime.
PAIRED_FILE = "paired_file"
RELEASE_INT8_TOP1 = "release_int8_top1_pct"
CANDIDATE_INT8_TOP1 = "candidate_int8_top1_pct"
REGRESSION = "regression_pts"  # release - candidate on the paired samples
RELEASE_INT8_CER = "release_int8_cer_pct"  # text recognition
CANDIDATE_INT8_CER = "candidate_int8_cer_pct"
CER_INCREASE = "cer_increase_pts"  # candidate - release
RELEASE_PREDICTIONS = "release_predictions"  # where the release's predictions came from: one of the three below
FROM_EVALUATION, FROM_CACHE, SCORED = "the release's stored evaluation", "the release-predictions cache", "scored now"
SCORED_SAMPLES = "scored_samples"  # samples the release's model was run on here
SECONDS = "seconds"

OUTPUTS = StageOutputs(
    stage=STAGE,
    description="the current release scored on this version's unseen test samples in every runtime, "
                "paired with this version's predictions (champion vs challenger)",
    files=(),
    optional_files=tuple(f"paired_{runtime}.npz" for runtime in ("onnxruntime", "openvino", "paddle_inference")),
    metrics=(RELEASE_VERSION, STATUS, PROBLEM, TASK, TEST_SAMPLES, DROPPED_OVERLAP, DROPPED_SEEN_BY_RELEASE,
             DROPPED_SEEN_BY_CANDIDATE, PAIRED_SAMPLES, PAIRED_FINGERPRINT, DATA_FINGERPRINT,
             RELEASE_DATA_FINGERPRINT, CLASSES, RUNTIMES, RELEASE_SCORING_S),
)


def paired_file(runtime: str) -> str:
    return f"paired_{runtime}.npz"
