"""Report stage: report.md and PNG plots of the run, from what the stages above stored."""

from quantgate.stages.report.markdown import ReportResult, report
from quantgate.stages.report.outputs import OUTPUTS

__all__ = ["OUTPUTS", "ReportResult", "report"]
