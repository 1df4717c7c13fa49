"""The CPU an evaluation ran on: the instruction-set flags that decide which INT8 kernels each runtime can take.

An INT8 speedup measured on one CPU says little about another: AVX512-VNNI, AVX-VNNI and AMX each open
different kernels in onnxruntime (MLAS), OpenVINO and oneDNN, and OpenVINO runs FP32 models in bf16 on
CPUs with AVX512-BF16 or AMX unless told otherwise. Every evaluation records the flags it had.
"""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni")
AMX_INT8 = "amx_int8"  # the AMX tile instructions onnxruntime's and oneDNN's INT8 GEMMs use


def cpu_record(cpuinfo: Path = CPUINFO) -> dict:
    """{"flags": sorted flags of interest (all amx_* included), "model": model name, "amx": AMX-INT8 present}.

    Where /proc/cpuinfo cannot be read (not Linux), flags is empty and "amx" false: nothing is assumed.
    """
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's; all cores of a machine agree
    flags = set(fields.get("flags", "").split())
    wanted = sorted(flag for flag in flags if flag in FLAGS_OF_INTEREST or flag.startswith("amx_"))
    model = fields.get("model name") or platform.processor() or platform.machine()
    return {"flags": wanted, "model": model, "amx": AMX_INT8 in flags}
