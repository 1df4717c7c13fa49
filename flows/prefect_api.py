"""Is the Prefect API the run will report to reachable? Asked once, before a version is created.

Without this check an unreachable PREFECT_API_URL surfaces as a RuntimeError traceback from
inside Prefect's engine; with it the user gets the URL, the setting to fix, and exit code 3.
"""

from __future__ import annotations

from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL

from quantgate.errors import QuantgateError


class PrefectApiUnreachable(QuantgateError):
    """PREFECT_API_URL names a server that does not answer its health check (exit 3: the pipeline could not start)."""


def check_prefect_api() -> None:
    """Raise if PREFECT_API_URL is set and its /health endpoint does not answer.

    With no PREFECT_API_URL, Prefect starts a temporary local server for the run; nothing to check.

    Raises:
        PrefectApiUnreachable: naming the URL, the error, and the setting to fix.
    """
    url = PREFECT_API_URL.value()
    if not url:
        return
    with get_client(sync_client=True) as client:
        problem = client.api_healthcheck()
    if problem is not None:
        raise PrefectApiUnreachable(
            f"the Prefect API at {url} is not reachable ({type(problem).__name__}: {problem or 'no answer'}). "
            "Start that server (`prefect server start`) or fix PREFECT_API_URL (environment variable or "
            "`prefect config set PREFECT_API_URL=...`); unset it to run on a temporary local server. "
            "Nothing was run and no version was created."
        )
