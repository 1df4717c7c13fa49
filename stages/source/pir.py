"""Recognising a PIR inference model (Paddle 3's default export) and the message that refuses it.

PaddleSlim 2.6 `quant_post_static` and paddle2onnx 1.3.1 read only the legacy program format
(`<prefix>.pdmodel` + `<prefix>.pdiparams`). A PIR export (`<prefix>.json` + `<prefix>.pdiparams`) cannot
be brought into that format faithfully with Paddle 3.3.1, so it is refused before anything runs:

- Paddle's only program translator goes the other way (`paddle.pir.translate_to_pir`: legacy
  ProgramDesc -> PIR); nothing turns a PIR program back into a ProgramDesc.
- `paddle.jit.load` of a `.json` gives a layer that replays the PIR program; re-saving it under
  `paddle.pir_utils.DygraphOldIrGuard` fails, since tracing copies PIR operations and a legacy block
  cannot hold them. With FLAGS_enable_pir_api=0 Paddle does not read `.json` at all.
- The parameters file is the same in both formats (byte-identical for the same layer), but the
  program cannot travel with it, and rebuilding it op by op would be a translator of our own.

The check reads only file names, so it imports no Paddle.
"""

from __future__ import annotations

from pathlib import Path

from quantgate.errors import clipped

PIR_PROGRAM_SUFFIX = ".json"
LEGACY_PROGRAM_SUFFIX = ".pdmodel"
PARAMS_SUFFIX = ".pdiparams"
MAX_LISTED_CHARS = 400

# The exact commands that write the legacy format. PaddleOCR 3 writes `.json` only when
# Global.export_with_pir is true (it then asserts FLAGS_enable_pir_api is not 0), otherwise it saves under
# paddle.pir_utils.OldIrGuard; PaddleX 3 sets export_with_pir from FLAGS_json_format_model, which defaults
# to true, so FLAGS_enable_pir_api=0 alone makes a PaddleX export fail rather than write `.pdmodel`.
PADDLEOCR_EXPORT = (
    "FLAGS_enable_pir_api=0 python tools/export_model.py -c CONFIG.yml "
    "-o Global.pretrained_model=CHECKPOINT Global.save_inference_dir=OUT_DIR Global.export_with_pir=False"
)
PADDLEX_EXPORT = (
    "FLAGS_json_format_model=0 FLAGS_enable_pir_api=0 python main.py -c CONFIG.yaml "
    "-o Global.mode=export -o Export.weight_path=CHECKPOINT.pdparams -o Global.output=OUT_DIR"
)
JIT_SAVE_EXPORT = (
    "FLAGS_enable_pir_api=0 python your_export.py  # paddle.jit.save(layer, 'OUT_DIR/inference', input_spec=...); "
    "the flag is read when paddle is first imported, so set it in the environment or in os.environ before "
    "`import paddle`, or call paddle.jit.save inside `with paddle.pir_utils.DygraphOldIrGuard():`"
)


def is_pir_model(folder: Path, prefix: str) -> bool:
    """True for a PIR export: `<prefix>.json` is there and `<prefix>.pdmodel` is not."""
    folder = Path(folder)
    return (folder / f"{prefix}{PIR_PROGRAM_SUFFIX}").is_file() and not (
        folder / f"{prefix}{LEGACY_PROGRAM_SUFFIX}"
    ).exists()


def pir_refusal(folder: Path, prefix: str) -> str:
    """The BadInput message for a PIR model in `folder`: what was found, why it cannot be used, and the
    commands that export the same model in the legacy format."""
    folder = Path(folder)
    found = ", ".join(sorted(entry.name for entry in folder.iterdir())) if folder.is_dir() else "nothing"
    return (
        f"{folder} holds a PIR inference model ({prefix}{PIR_PROGRAM_SUFFIX}, Paddle 3's default export "
        f"format; files found: {clipped(found, MAX_LISTED_CHARS)}). quantgate quantizes with PaddleSlim 2.6 "
        f"and converts with paddle2onnx 1.3.1, which read only the legacy format ({prefix}{LEGACY_PROGRAM_SUFFIX} "
        f"+ {prefix}{PARAMS_SUFFIX}), and Paddle 3.3.1 cannot convert a PIR program back to it faithfully: "
        "its only translator goes from legacy to PIR, and a PIR model loaded with paddle.jit.load cannot be "
        "re-saved in the legacy format. Export the model again from its training checkpoint in the legacy "
        "format, then point quantgate at the folder holding the .pdmodel:\n"
        f"  PaddleOCR 3:     {PADDLEOCR_EXPORT}\n"
        f"  PaddleX 3:       {PADDLEX_EXPORT}\n"
        f"  paddle.jit.save: {JIT_SAVE_EXPORT}"
    )
