"""Which user networks a run started from a deployment may import: the worker's allowlist.

`train.architecture = package.module:factory` imports that module in the training process. On a
laptop that is the user's own code; on a Prefect worker the flow parameters come from whoever may
create flow runs, so a name alone would make the worker import any module on its path (and run its
import-time code). A run from a deployment may therefore only name factories the worker's own
environment lists in QUANTGATE_TRUSTED_FACTORIES; `quantgate run` on the user's machine is unchanged.

The check runs before anything imports the named module: it only reads strings.
"""

from __future__ import annotations

import os
import re

from quantgate.errors import BadInput, clipped

TRUSTED_FACTORIES_ENV = "QUANTGATE_TRUSTED_FACTORIES"
_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_ENTRY = re.compile(rf"^{_MODULE}:([A-Za-z_][A-Za-z0-9_]*|\*)$")


class UntrustedFactory(BadInput):
    """A run from a deployment names a user factory the worker does not trust (exit 2)."""


def running_from_deployment() -> bool:
    """Whether the current flow run was created from a deployment (False outside any flow run).

    Asks Prefect's runtime and the flow run's own record; either one saying "deployment" is enough,
    so an environment variable that mocks the runtime cannot make a deployment run look local.
    """
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    context = FlowRunContext.get()
    recorded = context is not None and context.flow_run is not None and context.flow_run.deployment_id is not None
    return recorded or deployment.id is not None


def check_trusted_factory(architecture: str, from_deployment: bool) -> None:
    """Refuse a `module:factory` architecture from a deployment run unless the worker trusts it.

    Built-in names (digits_cnn, paddle.vision.models names) and every local run pass untouched.
    The allowlist is `QUANTGATE_TRUSTED_FACTORIES` of the worker: comma-separated `module:factory`
    or `module:*` entries; unset or empty trusts none.

    Raises:
        UntrustedFactory: naming the factory, the setting and the fix, before the module is imported.
    """
    if not from_deployment or ":" not in architecture:
        return
    module, _, _ = architecture.partition(":")
    entries = _trusted_entries(architecture)
    if architecture in entries or f"{module}:*" in entries:
        return
    listed = f"lists {', '.join(sorted(entries))}" if entries else "is empty (the default: no user factories)"
    raise UntrustedFactory(
        f"train.architecture={_shown(architecture)} names user code, and a run started from a deployment may only "
        f"name factories the worker trusts: {TRUSTED_FACTORIES_ENV} on this worker {listed}. Nothing was imported "
        f"and no version was created. If the worker should run it, add '{_shown(architecture, quoted=False)}' (or "
        f"'{_shown(module, quoted=False)}:*' for the whole module) to {TRUSTED_FACTORIES_ENV} in the worker's "
        "environment and restart the worker; or run it on your own machine with `quantgate run`"
    )


def _trusted_entries(architecture: str) -> set[str]:
    """The worker's allowlist, refusing a run that sets it itself (a flow run's job variable `env`)."""
    if TRUSTED_FACTORIES_ENV in _run_job_env():
        raise UntrustedFactory(
            f"train.architecture={_shown(architecture)} names user code, and this flow run sets "
            f"{TRUSTED_FACTORIES_ENV} in its own job variables (env): only the worker's environment may trust "
            "user factories. Nothing was imported and no version was created. Start the run without that job "
            f"variable, and add the factory to {TRUSTED_FACTORIES_ENV} where the worker is started"
        )
    raw = os.environ.get(TRUSTED_FACTORIES_ENV, "")
    entries = {entry.strip() for entry in raw.split(",") if entry.strip()}
    malformed = sorted(entry for entry in entries if not _ENTRY.fullmatch(entry))
    if malformed:  # fail closed: a typo in the allowlist must not widen it or be silently dropped
        raise UntrustedFactory(
            f"{TRUSTED_FACTORIES_ENV} on this worker has entries that are not 'module:factory' or 'module:*': "
            f"{', '.join(_shown(entry) for entry in malformed)}; fix them and restart the worker"
        )
    return entries


def _run_job_env() -> dict:
    """The `env` job variables the current flow run itself asked for ({} outside a flow run)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    job_variables = (context.flow_run.job_variables if context is not None and context.flow_run else None) or {}
    env = job_variables.get("env")
    return env if isinstance(env, dict) else {}


def _shown(text: str, quoted: bool = True, limit: int = 200) -> str:
    """`text` for a message, cut so a hostile parameter cannot flood the log."""
    return clipped(repr(text) if quoted else text, limit)
