"""Which layers of the search's base trial to leave in FP32: ranked by sensitivity, sets judged by estimate.

The base trial is the recipe closest to FP32. Its layers are ranked by what leaving each one alone
in FP32 gives back (`layer_sensitivity.rank_layers`); a set of fall-backs is judged by the
estimate (`FallbackEstimator`, no PaddleSlim run) before a real trial confirms it. A layer whose
fall-back cannot be assembled from the base calibration is measured by a PaddleSlim run instead. What is
PaddleSlim's (the layers, the estimator, a real run for one layer) comes from the runner's producer
(`trials.Producer`): on a PIR model's ONNX graph every "estimate" is a real calibration from the base's statistics.

A fall-back is a group: the layer and the grids that only feed it (`groups`). An AdaRound base is ranked and
estimated on its nearest-rounding twin (the same recipe, rounding 'nearest'): AdaRound moves codes off the
rounding of the float weight, so its layers' float weights could not be matched and each would cost a
PaddleSlim run; the twin has the same grids, and the real trials still fit with AdaRound.
"""

from __future__ import annotations

import json
import logging
import time

from quantgate.config import QuantizeConfig, QuantizeRecipe
from quantgate.errors import StageError
from quantgate.progress import live
from quantgate.stages.quantize.layer_sensitivity import FallbackEstimator, rank_layers
from quantgate.stages.quantize.trials import CANDIDATE_FAILURES, Trial, TrialRunner, content_digest
from quantgate.stages.quantize.validation_check import policy_failures

log = logging.getLogger(__name__)


class FallbackRanking:
    """The base trial's layers ranked for FP32 fall-back, and fall-back sets scored without a PaddleSlim run."""

    def __init__(self, runner: TrialRunner, base: Trial, base_settings: QuantizeConfig):
        self.runner, self.base, self.base_settings = runner, base, base_settings
        # What the ranking and the estimates start from: the base, or an AdaRound base's nearest-rounding twin.
        self.twin_settings = (base_settings.with_recipe(QuantizeRecipe(rounding="nearest"))
                              if base_settings.rounding == "adaptive" else None)
        self._layers: list[str] | None = None  # the layers quantized in the base trial
        self._estimators: dict[tuple[str, ...], FallbackEstimator | None] = {}
        self.estimates: list[dict] = []  # fall-back sets scored without a PaddleSlim run

    def layers(self) -> list[str]:
        """The layers quantized in the base trial (weight names, graph order), read once (`Producer.layers`)."""
        if self._layers is None:
            self._layers = self.runner.producer.layers(self.base)
        return self._layers

    def estimator(self, skipped: tuple[str, ...] = ()) -> FallbackEstimator | None:
        """What FP32 fall-backs of the base trial would score without a full trial (`Producer.estimator`: for
        PaddleSlim, from one extra PaddleSlim run, cached; on the ONNX graph, real calibrations from the base's
        statistics).

        `skipped`: layers whose fall-back cannot be assembled (`FallbackEstimator.float_weights` lacks
        them); the estimate then starts from a real calibration with them skipped.
        """
        if skipped in self._estimators:
            return self._estimators[skipped]
        layers = self.layers()
        try:
            estimator = self.runner.producer.estimator(self.base, self.base_settings, self.twin_settings, layers,
                                                       skipped, self.runner.check, len(self._estimators))
            if not skipped:
                log.info("search: FP32 fall-backs can be estimated for %d of %d layers; not for %s",
                         len(estimator.float_weights), len(layers),
                         ", ".join(sorted(set(layers) - set(estimator.float_weights))) or "none")
        except (StageError, RuntimeError, ValueError) as exc:
            log.warning("search: no fall-back estimates (%s); each layer is measured by a real calibration", exc)
            estimator = None
        self._estimators[skipped] = estimator
        return estimator

    def groups(self, layers: list[str]) -> dict[str, list[str]]:
        """Per layer, the grids its fall-back reverts with it (its group besides the layer); {} without estimates."""
        estimator = self.estimator()
        if estimator is None:
            return {}
        return {layer: estimator.group_grids(layer) for layer in layers}

    def _baseline(self, estimator: FallbackEstimator | None) -> dict:
        """The scores fall-backs are ranked against: the base trial's, or its nearest-rounding twin's."""
        if self.twin_settings is None or estimator is None:
            return self.base.validation
        return estimator.score(())

    def sensitivity(self, estimator: FallbackEstimator | None) -> tuple[list[dict], bool]:
        """The base trial's layers, most sensitive first; cached by calibration inputs and validation data."""
        runner = self.runner
        digest = content_digest(self.base.calibration_digest, runner.validation_digest, "fp32-fall-back ranking",
                                runner.lowering.options())
        if runner.cache is not None and (entry := runner.cache.get(digest)) is not None:
            return json.loads((entry / "ranking.json").read_text()), True
        scratch = runner.scratch / f"ranking-{digest[:12]}"
        scratch.mkdir()
        layers = self.layers()
        estimable = set(estimator.float_weights) if estimator is not None else set()


        def score_without(layer: str) -> dict:
            lowered = scratch / f"without-{layers.index(layer)}.onnx"  # a real calibration
            try:
                if layer in estimable:  # on the ONNX graph a real calibration too, which can fail as one
                    return estimator.score((layer,))
                runner.producer.lowered_without(self.twin_settings or self.base_settings, (layer,), lowered)
            except CANDIDATE_FAILURES as exc:
                # this layer's fall-back cannot be built: it is not ranked (never fallen back), the rest are
                log.warning("search: the FP32 fall-back of %s could not be built and is not ranked: %s", layer, exc)
                return None
            return {**runner.check.score(lowered), "measured_by": runner.producer.name}

        # The ranking may use half of the time left; the fall-back trials need the rest.
        deadline = time.monotonic() + (runner.budget.timeout_s - runner.elapsed_s()) / 2
        ranking, completeness = rank_layers(layers, score_without, self._baseline(estimator), deadline)
        if runner.cache is not None and completeness == "complete":
            with runner.cache.fill(digest) as folder:
                (folder / "ranking.json").write_text(json.dumps(ranking, sort_keys=True, indent=2) + "\n")
        return ranking, False

    def estimate(self, float_layers: list[str]) -> bool | None:
        """Whether the base trial with `float_layers` in FP32 would pass, by the estimate; None: cannot tell.

        The estimate has no latency of its own: it is judged with the base trial's speedup, which a
        fall-back can only lower, so a real trial still decides.
        """
        main = self.estimator()
        if main is None or self.runner.elapsed_s() >= self.runner.budget.timeout_s:
            return None
        skipped = tuple(layer for layer in float_layers if layer not in main.float_weights)
        estimator = self.estimator(skipped)
        if estimator is None:
            return None
        try:
            validation = estimator.score([layer for layer in float_layers if layer not in skipped])
        except CANDIDATE_FAILURES as exc:
            log.warning("search: the estimate with %d FP32 layers could not be built (%s); a real trial decides",
                        len(float_layers), exc)
            return None
        failures = policy_failures(self.runner.policy,
                                   {**validation, "speedup_int8_vs_fp32": self.base.speedup_int8_vs_fp32})
        self.estimates.append({"float_layers": list(float_layers), "validation": validation, "passed": not failures})
        live(log, "search estimate, %d FP32 layers: drop %.2f pts, agreement %.4f -> %s", len(float_layers),
                  validation["accuracy_drop_pts"], validation["agreement"], "passes" if not failures else "misses")
        return not failures
