"""What the train stage writes: float32 weights, per-step records, AMP's operator record, reference logits."""

from quantgate.stages.shared.outputs import StageOutputs

WEIGHTS_FILE = "weights.npz"
STEPS_FILE = "steps.csv"
REFERENCE_LOGITS_FILE = "reference_logits.npy"
OP_PRECISION_FILE = "op_precision.json"
VISUALDL_DIR = "vdl"
LAUNCH_DIR = "launch"  # multi-process runs: launcher logs and one result file per rank

ARCHITECTURE = "architecture"
TASK = "task"  # classification or text_recognition, from the data stage's record
NECK = "neck"  # crnn: train.neck, which export needs to build the same network; null for other architectures
AMP = "amp"
SCALER = "scaler"
DATA_LOADER = "data_loader"  # DataLoader workers, and whether the images were read from disk
AUGMENTATION = "augmentation"  # the data stage's training augmentation, as applied
DISTRIBUTED = "distributed"  # multi-process runs: world size, backend, each rank's weights digest
INIT_FROM = "init_from"  # train.init_from: where the starting weights came from and which keys started fresh

OUTPUTS = StageOutputs(
    stage="train",
    description="AMP training; the float32 master weights, step records and AMP's operator counts",
    files=(WEIGHTS_FILE, STEPS_FILE, REFERENCE_LOGITS_FILE, OP_PRECISION_FILE, VISUALDL_DIR),
    optional_files=(LAUNCH_DIR,),
    metrics=(ARCHITECTURE, TASK, NECK, "num_classes", "input_shape", "steps", "final_epoch_loss_mean",
             "train_seconds", "samples_per_second", "loss_scale_final", SCALER, "resumed_from_epoch",
             "epochs_trained_in_this_run", AMP, DATA_LOADER, AUGMENTATION, DISTRIBUTED, INIT_FROM),
)
