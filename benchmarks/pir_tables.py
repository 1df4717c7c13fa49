"""benchmarks/pir_models.py's Markdown: per part, its forms' accuracy and latency, the PIR path's records, and its
targets with met / not met."""

from __future__ import annotations


def _number(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _forms(part: dict) -> list[str]:
    """One row per form: accuracy (line accuracy, or hmean), CER or precision/recall, agreement, median ms by batch."""
    batches = sorted({row["batch"] for row in part["latency"] if "variant" in row})
    median = {(row["batch"], row["variant"]): row for row in part["latency"] if "variant" in row}
    lines = ["| form | runtime | accuracy % | CER % / P-R % | agreement with own FP32 | "
             + " | ".join(f"b{b} median ms (p10-p90)" for b in batches) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(batches)]
    for name, scores in part["scores"].items():
        second = (_number(scores["cer_pct"]) if "cer_pct" in scores
                  else f"{_number(scores.get('precision_pct'))} / {_number(scores.get('recall_pct'))}")
        cells = [f"{median[(b, name)]['latency_ms_p50']:.2f} ({median[(b, name)]['latency_ms_p10']:.2f}-"
                 f"{median[(b, name)]['latency_ms_p90']:.2f})" for b in batches]
        runtime = median[(batches[0], name)]["runtime"] if batches else ""
        lines.append(f"| {name} | {runtime} | {_number(scores['top1_pct'])} | {second} | "
                     f"{_number(scores.get('agreement_with_own_fp32'), 4)} | " + " | ".join(cells) + " |")
    pairs = [row for row in part["latency"] if "pair" in row]
    if pairs:
        lines += ["", "| batch | time ratio (a/b, paired by round) | median | 95% CI |", "|---:|---|---:|---|"]
        lines += [f"| {row['batch']} | {row['pair']} | {row['median']:.3f} | {row['ci95'][0]:.3f}-{row['ci95'][1]:.3f} |"
                  for row in pairs]
    lines += [f"- {name}: {ops.get('int8')} of {ops.get('total_conv_matmul')} convolutions/matmuls in INT8"
              for name, ops in part.get("int8_kernels", {}).items() if isinstance(ops, dict)]
    return lines


def _conversion(record: dict | None) -> list[str]:
    if not record:
        return []
    converter, check = record.get("converter") or {}, record.get("check_vs_paddle") or {}
    return [(f"- converter: paddle2onnx {converter.get('version')} ({converter.get('folder')}); program format "
            f"{record.get('program_format')}; patches {record.get('patches')}"),
            f"- normalised (rewrite counts): {record.get('normalised')}",
            (f"- check vs Paddle Inference: max abs diff {check.get('max_abs_diff')} (limit "
            f"{check.get('max_abs_diff_limit')}) on {check.get('samples')} samples"),
            f"- INT8 calibrated by: {record.get('calibrated_by')}; search: {record.get('search')}"]


def _memory(memory: dict | None) -> list[str]:
    if not memory or not memory.get("budget"):
        return []
    peaks = ", ".join(f"{stage} {entry['peak_rss_gb']:.2f}" for stage, entry in memory["stages"].items())
    return [(f"- memory: peaks (GB) {peaks}; budget {memory['budget']['budget_gb']:.2f} GB "
            f"({memory['budget'].get('budget_source')})")]


def _system(part: dict) -> list[str]:
    lines = [f"- models: {part['models']}; runs: {part['runs']}"]
    if "rows" not in part:
        return lines
    lines += [f"- system {part['stored_as']}: gate {part['system_status']}", "",
              "| runtime | system | e2e lines % | CER (matched) % | missed | spurious | page p50 ms | det / crops / rec ms |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['runtime']} | `{r['system']}` | {r['e2e_line_accuracy_pct']:.2f} | {r['cer_matched_pct']:.2f} | "
              f"{r['missed']} | {r['spurious']} | {r['page_ms_p50']:.1f} | {r['detection_ms_p50']:.1f} / "
              f"{r['crops_ms_p50']:.1f} / {r['recognition_ms_p50']:.1f} |" for r in part["rows"]]
    return lines


def markdown(result: dict) -> str:
    cpu = result["cpu"]
    lines = [f"# PIR models (issue 52): `{result['command']}`", "",
             (f"{cpu['model']} (flags: {', '.join(cpu['flags'])}; AMX: {cpu['amx']}; /proc/cpuinfo: "
             f"{', '.join(result['cpuinfo_int8_flags']) or 'none'}); {', '.join(result['libraries'])}; "
             f"{result['threads']} threads; {result['repeats']} timed runs per cell in {result['rounds']} blocks; "
             f"paddle2onnx 2.x installed by `{result['install_line']}`; {result['wall_s']} s in all."), ""]
    targets = []
    for part in result["parts"]:
        lines += [f"## {part['part']}", "", f"- data: {part['data']}"]
        if "run_wall_s" in part:
            lines.append(f"- {part['stored_as']}: quantgate run {part['run_wall_s']} s, exit {part['run_exit_code']}; "
                         f"gate {part['gate_status']}"
                         + (f" (failed: {', '.join(part['gate_failed'])})" if part["gate_failed"] else ""))
        if "gates" in part:
            lines.append(f"- runs: {part['runs']}; gates: {part['gates']}")
        lines += _conversion(part.get("conversion"))
        lines += _memory(part.get("memory"))
        if part["part"] == "system":
            lines += _system(part)
        if "scores" in part:
            lines += ["", *_forms(part)]
        lines.append("")
        targets += [(part["part"], target) for target in part["targets"]]
    lines += ["| part | target | measured | met |", "|---|---|---|---|"]
    for name, target in targets:
        met = "n/a" if target["met"] is None else "met" if target["met"] else "**not met**"
        lines.append(f"| {name} | {target['target']} | {target['measured']} | {met} |")
    return "\n".join(lines) + "\n"
