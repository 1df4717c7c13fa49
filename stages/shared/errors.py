"""The base of the errors the stages raise; each stage package defines its own subclasses."""

from quantgate.errors import QuantgateError


class StageError(QuantgateError):
    """A stage could not produce a trustworthy result (the pipeline broke: exit 3)."""
