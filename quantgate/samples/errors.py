"""The errors of reading and recording samples: each message names the folder, file or setting and the fix."""

from quantgate.errors import BadInput, StageError


class DataError(StageError, BadInput):
    """The dataset or its split is unusable."""


class BadTextLines(DataError):
    """A text-line dataset is unusable: its label file, dictionary or an image it names (each named, with the fix)."""


class BadTextBoxes(DataError):
    """A text-detection dataset is unusable: its label file, a box in it or a page it names (each named, with a fix)."""
