"""benchmarks/amp_gpu.py refuses to 'measure' AMP where it cannot run (this suite runs on CPU Paddle)."""

import subprocess
import sys
from pathlib import Path

import paddle
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "amp_gpu.py"


@pytest.mark.skipif(paddle.device.is_compiled_with_cuda(), reason="this Paddle is a CUDA build")
def test_without_a_cuda_build_it_exits_2_and_says_why():
    result = subprocess.run([sys.executable, str(SCRIPT), "--models", "resnet50", "--steps", "1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "is not a CUDA build, so AMP cannot run here" in result.stderr
    assert "paddlepaddle-gpu" in result.stderr
    assert result.stdout == ""  # no table, no JSON: nothing was measured
