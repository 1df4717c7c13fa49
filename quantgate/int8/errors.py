"""The INT8 graph's error: paddle2onnx produced nothing usable, or the lowering went wrong."""

from quantgate.errors import StageError


class ConversionError(StageError):
    """paddle2onnx produced no model, or one that fails onnx.checker, or the INT8 lowering went wrong."""
