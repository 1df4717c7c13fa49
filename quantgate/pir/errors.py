"""The PIR library's errors: a folder, a converter or a conversion that cannot be used as given (exit 2)."""

from quantgate.errors import BadInput


class PirProblem(BadInput):
    """A PIR inference folder cannot be read as given; the message names the file and the fix."""


class ConverterMissing(PirProblem):
    """paddle2onnx 2.x is not installed where quantgate looks for it; the message gives the install line."""


class ConversionRefused(PirProblem):
    """paddle2onnx 2.x aborted, wrote nothing usable, or wrote a model whose outputs are not Paddle's: nothing is
    stored."""
