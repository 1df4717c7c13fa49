"""Source stage: a model trained elsewhere (a PaddleOCR, PaddleClas or PaddleX export) takes the train stage's place.

`check_trained_model` refuses a folder that holds no usable model, or a model the data cannot feed,
before anything runs; `import_model` keeps the checked files and records where they came from. The
export stage reads them as it reads a model trained here (`export.export_program`).
"""

from quantgate.stages.shared.lazy import lazy_exports
from quantgate.stages.source.outputs import OUTPUTS as OUTPUTS

__getattr__, __all__ = lazy_exports(__name__, {
    "ModelProblem": "errors", "SourceResult": "imported", "check_trained_model": "checks",
    "import_model": "imported", "model_files": "checks",
    "CheckedModel": "checks", "expected_classes": "checks", "expected_input": "checks",
})
