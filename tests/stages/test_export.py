import numpy as np
import pytest

from quantgate.int8.static_graph import load_program, persistable_dtypes, static_mode
from quantgate.stages.export.inference_model import ExportMismatch, export


def test_exported_model_is_float32_and_matches_training(stage_dirs):
    metrics = stage_dirs.results["export"].metrics
    assert (stage_dirs.export / "model.pdmodel").exists() and (stage_dirs.export / "model.pdiparams").exists()
    assert not list(stage_dirs.export.glob("*.json"))  # legacy program format, not PIR
    with static_mode():
        dtypes = persistable_dtypes(load_program(stage_dirs.export / "model").program)
    assert dtypes and set(dtypes.values()) == {"float32"}
    assert metrics["parameter_dtypes"] == ["float32"]
    assert 0.0 <= metrics["max_abs_diff_vs_trained"] <= 1e-4


def test_export_refuses_weights_that_do_not_reproduce_training(stage_dirs, tmp_path):
    reference = np.load(stage_dirs.train / "reference_logits.npy")
    wrong = tmp_path / "reference_logits.npy"
    np.save(wrong, reference + 1e-2)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ExportMismatch, match="differ from the trained model's by 0.01"):
        export(stage_dirs.train / "weights.npz", wrong, stage_dirs.data, "digits_cnn", out)
