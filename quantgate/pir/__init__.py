"""A PIR inference model (Paddle 3's default export: `inference.json` + `inference.pdiparams` [+ `inference.yml`]).

- `folder`: recognise the folder and read the program's inputs, outputs, ops and parameters from its JSON, with no
  Paddle import;
- `converter`: where paddle2onnx 2.x lives (a folder of its own beside the pinned 1.3.1) and its install line;
- `children`: every Paddle load of a PIR program, in a child process with FLAGS_enable_pir_api=1 (this process
  keeps the legacy flag PaddleSlim needs);
- `conversion`: the FP32 ONNX conversion, its patches, and the check against Paddle's own outputs.

What its `inference.yml` says is read with the config (quantgate/inference_yml.py), which every floor imports.
"""
