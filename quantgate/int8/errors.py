"""The convert stage's error."""

from quantgate.errors import StageError


class ConversionError(StageError):
    """paddle2onnx produced no model, or one that fails onnx.checker, or the INT8 lowering went wrong."""
