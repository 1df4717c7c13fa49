"""The INT8 search's cache is keyed by the quantize stage's code version as well as by content."""

from quantgate.artifacts import ArtifactStore


def test_an_entry_cached_by_other_code_is_never_returned(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    before = store.cache("quantize-search", salt="a" * 64)
    with before.fill("calibration-digest") as folder:
        (folder / "model.pdiparams").write_bytes(b"weights")
    assert (before.get("calibration-digest") / "model.pdiparams").read_bytes() == b"weights"

    after_an_edit = store.cache("quantize-search", salt="b" * 64)
    assert after_an_edit.get("calibration-digest") is None
