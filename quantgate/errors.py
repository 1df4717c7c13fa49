"""The root of quantgate's error family; each package defines its own subclasses.

Every error carries `exit_code` so the CLI can turn it into a process status without
knowing every subclass: 1 means the release gate said no, 2 means the input was bad,
3 means the pipeline itself broke.
"""


class QuantgateError(Exception):
    """Base class for every error quantgate raises on purpose."""

    exit_code = 3


class ConfigError(QuantgateError, ValueError):
    """The configuration is invalid; `problems` lists every bad field, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid configuration ({len(self.problems)} problem(s)):\n{lines}")
