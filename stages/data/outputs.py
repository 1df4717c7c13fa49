"""What the data stage writes: the dataset record, and the split arrays (built-in datasets) or the file table
(image folders, text lines); for text recognition also the character dictionary."""

from quantgate.stages.shared.outputs import StageOutputs

DATASET_FILE = "dataset.json"  # task, kind, classes or characters, input shape, transforms, augmentation, roots
SPLITS_FILE = "splits.npz"  # the built-in digits and digit_strings: the split arrays
TABLE_FILE = "files.csv.gz"  # image folders and text lines: every file, its split, label, size, mtime and sha256
DICTIONARY_FILE = "characters.txt"  # text recognition: one character per line (PaddleOCR's format), id = line number

FINGERPRINT = "fingerprint_sha256"
PREPROCESSING = "preprocessing"  # what a deployment must do to an image before the model
SAMPLES_CALIBRATION = "samples_calibration"
SOURCE = "source"  # files on disk: classes or label files, folders, file count and bytes, the table's digest
NUM_CHARACTERS = "num_characters"  # text recognition: the dictionary's size (num_classes is one more: the blank)
MAX_TEXT_LENGTH = "max_text_length"  # text recognition: the longest label, in characters
SPLIT_RULE = "split_rule"  # in words: how the samples went to train / calibration / validation / test
# text lines: how the validation split was sized, {"rule", "lines", "wanted", "short"} (validation_size.py)
VALIDATION_RULE = "validation_rule"
SKIPPED_LINES = "skipped_lines"  # text lines: each line left out, {"line", "file", "reason"}
# In the data stage's config (not its files, not its reuse digest): the absolute folders this version's run read
# the table's files from, {"path": ..., "test_path": ...}; a reused stage's dataset.json names another run's.
READ_FROM = "read_from"

OUTPUTS = StageOutputs(
    stage="data",
    description="seeded train / calibration / validation / test split of the digits, an image folder, text lines "
                "(file table) or the built-in digit strings",
    files=(DATASET_FILE,),
    optional_files=(SPLITS_FILE, TABLE_FILE, DICTIONARY_FILE),
    metrics=("dataset", "task", FINGERPRINT, "num_classes", "input_shape", "samples_train", SAMPLES_CALIBRATION,
             "samples_validation", "samples_test", SOURCE, PREPROCESSING, "augmentation", "skipped_images",
             NUM_CHARACTERS, MAX_TEXT_LENGTH, SKIPPED_LINES, "squeezed_lines", SPLIT_RULE,
             VALIDATION_RULE),
)
