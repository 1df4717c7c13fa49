"""Report stage: report.md and PNG plots of the run, from what the stages above stored."""

from quantgate.stages.report.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {"ReportResult": "markdown", "report": "markdown"})
