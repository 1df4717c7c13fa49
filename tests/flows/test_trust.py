"""The worker's allowlist of user factories: who may make a deployment run import what.

The end-to-end case (a real server, worker and deployment run) is in
tests/integration/test_prefect_server.py::test_a_deployment_run_cannot_import_an_untrusted_factory.
"""

from __future__ import annotations

import sys

import pytest
from prefect import flow

from quantgate.errors import EXIT_BAD_INPUT
from quantgate.flows.trust import (
    TRUSTED_FACTORIES_ENV,
    UntrustedFactory,
    check_trusted_factory,
    running_from_deployment,
)


@pytest.fixture
def marker_module(tmp_path, monkeypatch):
    """A module on sys.path that writes a marker file when imported; yields the marker's path."""
    marker = tmp_path / "imported"
    (tmp_path / "qg_marker_net.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef net(num_classes): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "qg_marker_net", raising=False)
    return marker


def test_a_deployment_run_with_no_allowlist_may_name_no_user_factory(monkeypatch, marker_module):
    monkeypatch.delenv(TRUSTED_FACTORIES_ENV, raising=False)
    with pytest.raises(UntrustedFactory) as refused:
        check_trusted_factory("qg_marker_net:net", from_deployment=True)
    message = str(refused.value)
    assert refused.value.exit_code == EXIT_BAD_INPUT
    for part in ("'qg_marker_net:net'", TRUSTED_FACTORIES_ENV, "is empty", "Nothing was imported",
                 "add 'qg_marker_net:net' (or 'qg_marker_net:*'", "restart the worker", "quantgate run"):
        assert part in message, message
    assert not marker_module.exists() and "qg_marker_net" not in sys.modules


@pytest.mark.parametrize("allowlist", ["qg_marker_net:net", " other:f , qg_marker_net:* ", "qg_marker_net:net,"])
def test_a_listed_factory_or_module_is_allowed(monkeypatch, allowlist):
    monkeypatch.setenv(TRUSTED_FACTORIES_ENV, allowlist)
    check_trusted_factory("qg_marker_net:net", from_deployment=True)


@pytest.mark.parametrize("allowlist", ["qg_marker_net:other", "qg_marker_net.sub:*", "qg_marker:*", "qg_marker_net"])
def test_an_unlisted_factory_is_refused_and_the_allowlist_is_named(monkeypatch, allowlist):
    monkeypatch.setenv(TRUSTED_FACTORIES_ENV, allowlist)
    with pytest.raises(UntrustedFactory, match=TRUSTED_FACTORIES_ENV):
        check_trusted_factory("qg_marker_net:net", from_deployment=True)


def test_a_malformed_allowlist_entry_fails_closed_and_is_named(monkeypatch):
    monkeypatch.setenv(TRUSTED_FACTORIES_ENV, "qg_marker_net:net, qg marker:*")
    with pytest.raises(UntrustedFactory, match="'qg marker:\\*'"):
        check_trusted_factory("other:net", from_deployment=True)


@pytest.mark.parametrize("architecture", ["digits_cnn", "resnet18", "mobilenet_v2"])
def test_built_in_networks_need_no_allowlist(monkeypatch, architecture):
    monkeypatch.delenv(TRUSTED_FACTORIES_ENV, raising=False)
    check_trusted_factory(architecture, from_deployment=True)


def test_a_local_run_may_name_any_factory(monkeypatch):
    monkeypatch.delenv(TRUSTED_FACTORIES_ENV, raising=False)
    check_trusted_factory("anything.at_all:factory", from_deployment=False)


def test_a_huge_architecture_is_echoed_cut(monkeypatch):
    monkeypatch.delenv(TRUSTED_FACTORIES_ENV, raising=False)
    with pytest.raises(UntrustedFactory) as refused:
        check_trusted_factory("m" * 100_000 + ":f", from_deployment=True)
    assert len(str(refused.value)) < 2000 and "(100004 characters)" in str(refused.value)


def test_only_a_flow_run_from_a_deployment_counts_as_one():
    @flow
    def local_flow() -> bool:
        return running_from_deployment()

    assert running_from_deployment() is False  # outside any flow run
    assert local_flow() is False  # `quantgate run` calls the flow like this: no deployment
