"""The source stage's errors: a model folder or model that cannot be gated as given (bad input, exit 2)."""

from quantgate.errors import BadInput, StageError


class ModelProblem(StageError, BadInput):
    """The trained model cannot be imported: every problem found is listed, each with its fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        listed = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"trained_model cannot be gated as given ({len(self.problems)} problem(s)); nothing was "
                         f"run or stored:\n{listed}")
