"""What the source stage writes: the imported model's files, as they were given, and where they came from."""

from quantgate.stages.shared.outputs import StageOutputs

MODEL_PREFIX = "inference"  # the files keep the name PaddleOCR, PaddleClas and PaddleX give them
MODEL_FILE = f"{MODEL_PREFIX}.pdmodel"
PARAMS_FILE = f"{MODEL_PREFIX}.pdiparams"
PIR_PROGRAM_FILE = f"{MODEL_PREFIX}.json"  # a PIR model's program (Paddle 3's default), in place of MODEL_FILE
SETTINGS_FILE = f"{MODEL_PREFIX}.yml"  # PaddleOCR 3 / PaddleX 3's deployment settings, kept when given

ORIGIN = "origin"  # path, prefix, every file's sha256 and size, format, converted_from
INPUT_SPEC = "input"  # {"name", "shape", "dtype"}
OUTPUT_SPEC = "output"  # {"name", "shape" (as declared), "measured_shape" (on one sample), "dtype", "kind"}
OPS = "op_histogram"
PARAMETERS = "parameters"  # numbers stored, over every persistable tensor
PARAMETER_TENSORS = "parameter_tensors"
PROGRAM_FORMAT = "program_format"  # "legacy" (MODEL_FILE) or "pir" (PIR_PROGRAM_FILE)
SETTINGS = "settings"  # a PIR model with inference.yml: per setting, the value used and "from" (inference.yml/config)
TRAINED_HERE = "trained_here"  # False: the records say the model was not trained (nor AMP used) here

OUTPUTS = StageOutputs(
    stage="source",
    description="a Paddle inference model trained elsewhere, checked against the data and kept byte for byte",
    files=(PARAMS_FILE,),
    optional_files=(MODEL_FILE, PIR_PROGRAM_FILE, SETTINGS_FILE),  # MODEL_FILE or PIR_PROGRAM_FILE (+ SETTINGS_FILE)
    metrics=(TRAINED_HERE, ORIGIN, INPUT_SPEC, OUTPUT_SPEC, OPS, PARAMETERS, PARAMETER_TENSORS, "task",
             PROGRAM_FORMAT, SETTINGS),
)
