"""The floors of the house, named once: what may import what is checked by `.importlinter` (docs/architecture.md).

    cli, bundle           the user's commands and the deployment bundles
    flows                 Prefect: stage functions wired into tasks and flows, publishing and reuse
    stages                one package per pipeline step; siblings that share only `outputs` declarations
    libraries             what several stages use, each named for what it is (LIBRARIES below)
    artifacts, config     the versioned store; the configuration schema and the error family
"""

STAGES_PACKAGE = "quantgate.stages"

# The libraries beneath the stages, as quantgate.<name>. Their code runs inside stages: a module of theirs that a
# stage imports is part of that stage's code version (flows/code_version.py), and their log records are the
# stage's (progress lines on the terminal, the Prefect run's logs).
# "pir": its conversion (with the int8 normaliser it calls) makes the export stage's FP32 ONNX model.
LIBRARIES = ("tasks", "samples", "runtimes", "int8", "policy", "ocr", "pictures", "models", "progress", "memory",
             "pir")

# Loggers whose records belong to the stage that is running: the stages' and the libraries'.
WORK_LOGGERS = (STAGES_PACKAGE, *(f"quantgate.{name}" for name in LIBRARIES))
