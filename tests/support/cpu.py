"""Tests whose INT8 numbers were measured on CPUs with integer dot-product instructions, and hold only there.

On an AVX2-only VM (no AVX-512 VNNI, AVX-VNNI or AMX) PP-OCRv4's recognizer quantized by PaddleSlim loses
far more lines in every runtime than on the VNNI and AMX machines these tests were written on, with the
code as it was before issue 26 (measured: 28.1 points in onnxruntime, 15.6 in OpenVINO, where the test
asks for at most 1), the digits search takes another path (it repeats a calibration, its kept trial has
no INT8 twin), and onnxruntime's two INT8 forms of the digits CNN (ConvSym and QGEMM with shifted
weights), equal to the bit on VNNI, differ by up to 3.6 in a logit.
The gate measures this where it runs and fails such a model there, as it should; these tests, which
assert a pass, need the instructions.

The cause was found in the second session of issue 26: without VNNI/AMX, onnxruntime's u8 x s8 kernels add
pairs of products in 16 bits and saturate. The pipeline now lowers with 7-bit weights there
(`quantgate/int8/weight_range.py`), and the flow tests that failed for it (the digits search's path, a policy
naming its failing criteria, the OCR bundles) pass on an AVX2-only CPU without this mark. What keeps it: the
imported recognizer still loses 1 of its 16 test lines there (the test allows none), and tests that lower at
8 bits on purpose (the ConvSym/QGEMM comparison, the search driven directly) still see the saturation.
"""

import pytest

from quantgate.int8.weight_range import INT8_DOT_PRODUCT_FLAGS
from quantgate.runtimes.cpu import cpu_record


def has_int8_dot_product() -> bool:
    return bool(set(INT8_DOT_PRODUCT_FLAGS) & set(cpu_record()["flags"]))


needs_int8_dot_product = pytest.mark.skipif(
    not has_int8_dot_product(),
    reason="INT8 accuracy measured on VNNI/AMX CPUs; this CPU has none of avx512_vnni, avx_vnni, amx_int8 "
           "(tests/support/cpu.py)")
