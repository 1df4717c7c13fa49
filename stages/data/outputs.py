"""What the data stage writes: the split arrays, and for image folders which file went where."""

from quantgate.stages.shared.outputs import StageOutputs

SPLITS_FILE = "splits.npz"
FILES_FILE = "files.csv"  # image folders: which file went to which split, as which class

FINGERPRINT = "fingerprint_sha256"
PREPROCESSING = "preprocessing"  # image folders: what a deployment must do to an image before the model
SAMPLES_CALIBRATION = "samples_calibration"

OUTPUTS = StageOutputs(
    stage="data",
    description="seeded train / calibration / validation / test split of the digits or an image folder",
    files=(SPLITS_FILE,),
    optional_files=(FILES_FILE,),
    metrics=("dataset", FINGERPRINT, "num_classes", "input_shape", "samples_train", SAMPLES_CALIBRATION,
             "samples_validation", "samples_test", "source", PREPROCESSING),
)
