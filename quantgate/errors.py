"""The root of quantgate's error family and the exit codes it carries.

Every error quantgate raises on purpose is a `QuantgateError`; its `exit_code` is what the CLI
returns, so the CLI never needs to know the subclasses. Each subclass is defined in the module
(or package) that raises it, under one of the three kinds below:

- 1, `Rejected`: the release gate said no (or a move it governs was refused because of it);
- 2, `BadInput`: the configuration, data, store path or a named version is unusable, or the disk is full;
- 3, `QuantgateError` itself: the pipeline broke or could not start.
"""

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_BAD_INPUT = 2
EXIT_BROKE = 3


class QuantgateError(Exception):
    """Base class for every error quantgate raises on purpose: the pipeline broke (exit 3)."""

    exit_code = EXIT_BROKE


class BadInput(QuantgateError):
    """Something the user gave cannot be used; the message names it and the fix (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class StageError(QuantgateError):
    """A stage could not produce a trustworthy result (the pipeline broke: exit 3); each stage and library that
    works for a stage defines its own subclasses."""


class Rejected(QuantgateError):
    """The release policy said no: the gate failed, or an alias move it governs was refused (exit 1)."""

    exit_code = EXIT_REJECTED


def clipped(text: str, limit: int) -> str:
    """`text` for a message, cut to `limit` characters and naming its full length: a hostile or mistaken
    value must not turn one error line into megabytes of terminal or Prefect log."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"
