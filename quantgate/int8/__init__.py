"""The INT8 graph: PaddleSlim's quantized program read as scales, paddle2onnx's conversion, and the lowering
of its Q/DQ model to integer kernels (affine absorption, integer HardSwish, scale propagation, layers kept in
float, the weight bits of the target CPU). The convert stage applies it; the quantize stage's trials and
fall-back estimates lower with the same code, so what the search judges is what ships.
"""
