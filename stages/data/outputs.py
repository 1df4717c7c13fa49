"""What the data stage writes: the dataset record, and the split arrays (digits) or the file table (image folders)."""

from quantgate.stages.shared.outputs import StageOutputs

DATASET_FILE = "dataset.json"  # kind, classes, input shape, transforms, augmentation, where the folders lie
SPLITS_FILE = "splits.npz"  # the built-in digits: the split arrays
TABLE_FILE = "files.csv.gz"  # image folders: every file, its split, label, size, mtime and sha256

FINGERPRINT = "fingerprint_sha256"
PREPROCESSING = "preprocessing"  # image folders: what a deployment must do to an image before the model
SAMPLES_CALIBRATION = "samples_calibration"
SOURCE = "source"  # image folders: classes, folders, file count and bytes, the table's digest

OUTPUTS = StageOutputs(
    stage="data",
    description="seeded train / calibration / validation / test split of the digits or an image folder (file table)",
    files=(DATASET_FILE,),
    optional_files=(SPLITS_FILE, TABLE_FILE),
    metrics=("dataset", FINGERPRINT, "num_classes", "input_shape", "samples_train", SAMPLES_CALIBRATION,
             "samples_validation", "samples_test", SOURCE, PREPROCESSING, "augmentation", "skipped_images"),
)
