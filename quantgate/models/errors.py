"""The models' error; each message names the bad value and the fix."""

from quantgate.errors import BadInput, StageError


class ModelError(StageError, BadInput):
    """The configured architecture cannot be built (unknown name, bad entry point, failing factory), or weights
    do not fit it."""
