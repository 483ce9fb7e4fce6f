"""`edgekit check`: the CI gate. Convert and verify what a config lists; judge it against budgets.

The config (TOML) lists models, each with its targets, precisions, data and budgets:

    [[models]]
    name = "digits_cnn"
    path = "sample_models/digits_cnn.pt2"
    calibration = "sample_models/digits_calib.npz"   # needed for int8
    eval = "sample_models/digits_eval.npz"
    targets = ["tflite", "executorch", "onnx"]
    precisions = ["fp32", "int8"]

    [models.budgets]                 # for every precision ...
    max_accuracy_drop = 0.01         # task accuracy, source minus artifact (needs labels)
    [models.budgets.int8]            # ... and per precision, which wins
    cosine = 0.995                   # any verification metric: a minimum or a maximum as edgekit defines
    max_bytes = 60000

With `search = true` (or a `[models.search]` table with `min_int8_share` and `max_steps`), an int8
case that misses its metric budgets keeps the fewest layers back from int8 until they hold
(edgekit.engine.search); the baseline records the layers it kept, and the next run starts from them.
`bias_correction` corrects the int8 models' biases after calibration, `smooth_quant` smooths a
transformer's linears before it (both on by default where they apply; `= false` turns one off), `int16_stem = true` gives the activations at high resolution
int16, `int16_activations = true` all of them (onnx, ort; the search tries all four on its own; the baseline records whether it used them).

Instead of targets and precisions, a model may list `artifacts = ["build/m.int8.tflite", ...]`:
artifacts built elsewhere, verified as they are (target and precision read from the files).

Each model × target × precision is one case; a case fails when its verification fails or a budget
is broken. Failing int8 cases carry their layers ranked by the SQNR each loses (edgekit.features.attribution).
Every problem in the config is a BadInput naming the key. A config may come from a pull request, so
it cannot reach outside its project: `name` is a plain name (the model's folder under --out),
`module:function` specs must name modules inside the config's folder, and trust (--trust-pickle,
--trust-model-code) comes from the command line only.
"""

from edgekit.features.check.baseline import baseline_seeds, compare_baseline, write_baseline
from edgekit.features.check.case import Case
from edgekit.features.check.config import ModelCheck, load_config
from edgekit.features.check.render import to_json, to_junit, to_markdown
from edgekit.features.check.result import CheckResult, run_config
from edgekit.features.check.run import run_checks

__all__ = ["Case", "CheckResult", "ModelCheck", "baseline_seeds", "compare_baseline", "load_config", "run_checks",
           "run_config", "to_json", "to_junit", "to_markdown", "write_baseline"]
