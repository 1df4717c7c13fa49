"""Paddle's rewrite of a calibrated program into the quantized one, with two whole-graph scans taken out."""

from __future__ import annotations

import contextlib

from paddle.base.framework import IrGraph
from paddle.static.quantization import AddQuantDequantForInferencePass


@contextlib.contextmanager
def graph_edits_without_scans():
    """Paddle's program rewrite with two whole-graph scans taken out; the same edits, node for node.

    `IrGraph.link_to` asserts that both nodes are in the graph (a list of every node, per link), and the
    output-scale pass (`AddQuantDequantForInferencePass`) lists every persistable node twice per tensor to look
    for its scale: on PP-OCRv4's recognizer, 3,216 links and 602 scans of ~8,000 nodes, 11 of 14 s. While that
    pass runs, the persistable nodes are listed once and kept up to date as it creates them (it creates
    nothing else persistable; a removal drops the list); the nodes linked are the graph's own, made by its
    create_* calls. The saved program is byte-identical to paddle's (tests/stages/test_calibration_speed.py).
    """
    originals = {name: getattr(IrGraph, name) for name in ("link_to", "all_persistable_nodes",
                                                           "create_persistable_node", "safe_remove_nodes")}
    original_apply = AddQuantDequantForInferencePass.apply

    def link_to(graph, node_in, node_out):
        node_in.append_output(node_out)
        node_out.append_input(node_in)

    def all_persistable_nodes(graph):
        listed = getattr(graph, "_listed_persistable", None)
        return set(listed) if listed is not None else originals["all_persistable_nodes"](graph)

    def create_persistable_node(graph, *args, **kwargs):
        node = originals["create_persistable_node"](graph, *args, **kwargs)
        if getattr(graph, "_listed_persistable", None) is not None:
            graph._listed_persistable.add(node)
        return node

    def safe_remove_nodes(graph, remove_nodes):
        graph._listed_persistable = None
        return originals["safe_remove_nodes"](graph, remove_nodes)

    def apply(output_scales, graph):
        graph._listed_persistable = originals["all_persistable_nodes"](graph)
        try:
            return original_apply(output_scales, graph)
        finally:
            graph._listed_persistable = None

    replaced = {"link_to": link_to, "all_persistable_nodes": all_persistable_nodes,
                "create_persistable_node": create_persistable_node, "safe_remove_nodes": safe_remove_nodes}
    for name, method in replaced.items():
        setattr(IrGraph, name, method)
    AddQuantDequantForInferencePass.apply = apply
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(IrGraph, name, method)
        AddQuantDequantForInferencePass.apply = original_apply
