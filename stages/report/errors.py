"""The report stage's error: what it was given does not fit together."""

from quantgate.errors import StageError


class ReportError(StageError):
    """The evaluate stage's predictions do not match the data stage's test split (the pipeline broke: exit 3)."""
