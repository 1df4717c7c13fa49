"""The runtimes a model is judged and deployed on: onnxruntime, OpenVINO and Paddle Inference behind one
runner interface (`forms`), latency timing in a quiet child process, onnxruntime's INT8 forms, and the record
of the CPU a number was measured on. Used by evaluation, the search's trials, the OCR system and the bundle.
"""
