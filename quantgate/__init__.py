"""quantgate: AMP training to a gated INT8 release for PaddlePaddle models."""

import os

# PaddleSlim's post-training quantization reads and writes only the legacy program format
# (.pdmodel + .pdiparams); Paddle 3 defaults to PIR (.json). The flag is read when paddle is
# first imported, so it is set here, before any quantgate module imports paddle.
os.environ["FLAGS_enable_pir_api"] = "0"

__version__ = "0.1.0"
