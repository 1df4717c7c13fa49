"""Pipeline stages: plain functions that read input paths and write into a folder they are given.

One package per stage, in pipeline order; each package's `__init__` exposes its entry function and
`OUTPUTS` (the files it writes and the metric keys it reports, spelled once in its `outputs.py`).
`shared/` holds the few helpers several stages use. No stage imports Prefect or knows the store.

    data/      split the digits or an image folder            -> prepare_data
    source/    a model trained elsewhere, in train's place    -> import_model
    train/     AMP training, scaler accounting, checkpoints   -> train
    export/    FP32 master weights as an inference model      -> export
    quantize/  PaddleSlim PTQ and the accuracy-aware search   -> quantize, search_quantization
    convert/   paddle2onnx and the INT8 lowering              -> convert
    evaluate/  FP32 vs INT8 in onnxruntime, latency           -> evaluate
    duel/      the release scored on the same test samples    -> duel
    gate/      the release policy over measured criteria      -> gate, decide
    report/    report.md and plots                            -> report
    system/    an OCR system of stored models, end to end     -> evaluate_system, gate_system, report_system
    tasks/     what a task decodes and scores (classes, CTC lines, DB boxes)
"""

PIPELINE = ("data", "source", "system", "train", "export", "quantize", "convert", "evaluate", "duel", "gate", "report")
