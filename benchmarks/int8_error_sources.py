"""Where a real model's INT8 loses its lines: weights or activations, and which activation grids (issue 26).

    python benchmarks/trained_models.py --models rec --work /tmp/bench_work ...   # once: a store with one version
    python benchmarks/int8_error_sources.py --store /tmp/bench_work/rec_store --out benchmarks/results

From one quantgate version, paddle2onnx's QDQ model of the PaddleSlim program (PaddleSlim's grids, every one as
a QuantizeLinear -> DequantizeLinear pair) runs in onnxruntime with its graph optimizations off, so each pair
is exactly its float rounding (no integer kernel, no fusion). Against FP32, on the version's validation and
test lines:

  qdq                the PaddleSlim program as it is
  weights only       every activation pair removed: what the INT8 weights alone cost
  activations only   every weight pair removed and the FP32 weight put back where PaddleSlim's weight is its
                     rounding (a weight that equalization rescaled stays as it is, and is counted)
  lowered            the version's int8.onnx in onnxruntime as the evaluate stage runs it
  without <tensor>   one activation pair removed (every one, `--per-tensor`): what that grid alone costs
  weights only, <w> in FP32
                     the weights-only model with one weight back in FP32 (every one that can be): what that
                     weight's rounding alone costs

Scored by line accuracy, agreement with FP32 and the mean per-frame KL divergence from FP32's distribution
over characters (continuous, where a line is all or nothing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from outputs import write_results  # noqa: E402
from trained_models import stored_run  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.samples.reading import open_data  # noqa: E402
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, PADDLE2ONNX_INT8_FILE  # noqa: E402


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    found = {node.output[0]: numpy_helper.to_array(node.attribute[0].t)
             for node in model.graph.node if node.op_type == "Constant" and node.attribute}
    return {**found, **{init.name: numpy_helper.to_array(init) for init in model.graph.initializer}}


def qdq_pairs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    producer = {out: node for node in model.graph.node for out in node.output}
    return [(producer[node.input[0]], node) for node in model.graph.node if node.op_type == "DequantizeLinear"
            and node.input[0] in producer and producer[node.input[0]].op_type == "QuantizeLinear"]


def without_pairs(model: onnx.ModelProto, pairs: list, weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A copy with these Q/DQ pairs removed (their consumers read the float tensor), and weights replaced."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    dropped = {node.name for pair in pairs for node in pair}
    reads = {dq.output[0]: q.input[0] for q, dq in pairs}
    kept = [node for node in copy.graph.node if node.name not in dropped]
    for node in kept:
        node.input[:] = [reads.get(name, name) for name in node.input]
        if weights and node.op_type == "Constant" and node.output[0] in weights:
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(weights[node.output[0]], node.output[0]))
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    return copy


def fp32_weights(qdq: onnx.ModelProto, fp32: onnx.ModelProto, weight_pairs: list) -> tuple[dict, list[str]]:
    """FP32 weights whose rounding on PaddleSlim's grid is the weight the QDQ model holds; the others' names."""
    mine, theirs = constants(qdq), constants(fp32)
    replaced, kept = {}, []
    for q, _ in weight_pairs:
        name, stored = q.input[0], mine[q.input[0]]
        scale = mine[q.input[1]]
        scale = scale.reshape((-1,) + (1,) * (stored.ndim - 1)) if scale.ndim else scale  # per output channel
        original = theirs.get(name)
        if original is not None and original.shape == stored.shape:
            with np.errstate(divide="ignore", invalid="ignore"):  # an all-zero channel has scale 0
                codes = np.nan_to_num(np.clip(np.round(original / scale), -127, 127))
            if np.allclose(codes * scale, stored, rtol=1e-5, atol=1e-7):
                replaced[name] = original
                continue
        kept.append(name)
    return replaced, kept


class Scorer:
    def __init__(self, data, threads: int, splits: tuple[str, ...] = ("validation", "test")):
        splits = [split for split in splits if data.size(split)]
        self.images = np.concatenate([data.array(split)[0] for split in splits])
        self.references = np.concatenate([data.references(split) for split in splits])
        self.task, self.threads, self.splits = data.task, threads, splits
        self.fp32_probs = self.fp32_lines = None

    def outputs(self, model: onnx.ModelProto | Path, optimized: bool) -> np.ndarray:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.log_severity_level = self.threads, 3
        if not optimized:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        source = str(model) if isinstance(model, Path) else model.SerializeToString()
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return np.concatenate([session.run(None, {name: self.images[i:i + 32]})[0]
                               for i in range(0, len(self.images), 32)])

    def score(self, model: onnx.ModelProto | Path, optimized: bool = False) -> dict:
        probs = self.outputs(model, optimized)
        lines = self.task.predict(probs)
        if self.fp32_probs is None:
            self.fp32_probs, self.fp32_lines = probs, lines
        kl = np.sum(self.fp32_probs * (np.log(self.fp32_probs + 1e-12) - np.log(probs + 1e-12)), axis=-1)
        return {"line_accuracy_pct": self.task.scores(self.references, lines)["top1_pct"],
                "agreement": float(np.mean(lines == self.fp32_lines)), "kl_per_frame": float(np.mean(kl))}


def markdown(result: dict, top: int) -> str:
    lines = [f"# Where the INT8 loses its lines: {result['command']}", "",
             f"{result['cpu']['model']} (flags: {', '.join(result['cpu']['flags'])}); onnxruntime "
             f"{result['onnxruntime']}; model {result['model']}/{result['version']}; {result['lines']} lines "
             f"({' + '.join(result['splits'])})", "",
             "| variant | line accuracy % | agreement | KL per frame |", "|---|---:|---:|---:|"]
    def closest(rows: dict) -> list:
        return sorted(rows.items(), key=lambda kv: kv[1]["kl_per_frame"])[:top]

    rows = [*result["variants"].items(), *closest(result["per_tensor"]), *closest(result["per_weight"])]
    for name, r in rows:
        lines.append(f"| {name} | {r['line_accuracy_pct']:.2f} | {r['agreement']:.4f} | {r['kl_per_frame']:.4f} |")
    lines += ["", f"{result['activation_pairs']} activation and {result['weight_pairs']} weight pairs; "
              f"weights left as PaddleSlim stored them in 'activations only' (not its rounding of FP32): "
              f"{', '.join(result['weights_not_fp32']) or 'none'}."]
    if result["per_tensor"]:
        lines.append(f"Per tensor: the {top} of {len(result['per_tensor'])} activation grids whose removal "
                     f"brings the model closest to FP32 (KL), and the {top} of {len(result['per_weight'])} weights "
                     "whose FP32 value does the most for the weights-only model, are listed.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with one version of the model")
    parser.add_argument("--out", type=Path, default=None, help="folder for int8_error_sources.json and .md")
    parser.add_argument("--per-tensor", action=argparse.BooleanOptionalAction, default=True,
                        help="also remove each activation pair, and restore each weight, alone (a model run each)")
    parser.add_argument("--top", type=int, default=12, help="per-tensor rows shown")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    run = stored_run(args.store)
    convert = run["folders"]["convert"]
    scorer = Scorer(open_data(run["folders"]["data"]), args.threads)
    fp32, qdq = onnx.load(str(convert / FP32_FILE)), onnx.load(str(convert / PADDLE2ONNX_INT8_FILE))
    constant_names = set(constants(qdq))  # a pair quantizing a constant quantizes a weight
    pairs = qdq_pairs(qdq)
    weight_pairs = [pair for pair in pairs if pair[0].input[0] in constant_names]
    activation_pairs = [pair for pair in pairs if pair[0].input[0] not in constant_names]
    replaced, not_fp32 = fp32_weights(qdq, fp32, weight_pairs)
    variants = {"fp32": scorer.score(fp32), "qdq": scorer.score(qdq),
                "weights only": scorer.score(without_pairs(qdq, activation_pairs)),
                "activations only": scorer.score(without_pairs(qdq, weight_pairs, replaced)),
                "lowered": scorer.score(convert / INT8_FILE, optimized=True)}
    print(*(f"{name}: {r}" for name, r in variants.items()), sep="\n", flush=True)
    per_tensor, per_weight = {}, {}
    for index, pair in enumerate(activation_pairs if args.per_tensor else []):
        name = f"without {pair[0].input[0]}"
        per_tensor[name] = scorer.score(without_pairs(qdq, [pair]))
        print(f"  {index + 1}/{len(activation_pairs)} {name}: {per_tensor[name]}", flush=True)
    restorable = [pair for pair in weight_pairs if pair[0].input[0] in replaced] if args.per_tensor else []
    for index, pair in enumerate(restorable):
        weight = pair[0].input[0]
        name = f"weights only, {weight} in FP32"
        per_weight[name] = scorer.score(without_pairs(qdq, [*activation_pairs, pair], {weight: replaced[weight]}))
        print(f"  {index + 1}/{len(restorable)} {name}: {per_weight[name]}", flush=True)
    command = "python benchmarks/int8_error_sources.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": command,
              "cpu": cpu_record(), "onnxruntime": ort.__version__, "model": run["model"], "version": run["version"],
              "splits": scorer.splits, "lines": len(scorer.images), "activation_pairs": len(activation_pairs),
              "weight_pairs": len(weight_pairs), "weights_not_fp32": not_fp32, "variants": variants,
              "per_tensor": per_tensor, "per_weight": per_weight}
    write_results(args.out, "int8_error_sources", result, markdown(result, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
