"""benchmarks/first_call.py's verdicts: a warm first call meets its target within 1.5 x
onnxruntime's or 0.15 s, whichever is larger; a warm process that missed the index and a
wrong output are marked; the cold total is judged only over all the models."""
from benchmarks import first_call


def _runs(cold, warm, ort, from_index=True, correct=True):
    return {"cold": [{"first_call_s": cold, "import_s": 0.02, "correct": True}],
            "warm": [{"first_call_s": warm, "import_s": 0.02, "correct": correct, "from_index": from_index}],
            "onnxruntime": [{"first_call_s": ort, "import_s": 0.06, "correct": True}]}


def _rows(text):
    return {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ") and
            not line.startswith("| model")}


def test_warm_targets_and_marks():
    rows = _rows(first_call.table({
        "squeezenet": _runs(4.0, 0.14, 0.02),          # under the 0.15 s floor
        "shufflenet": _runs(4.0, 0.16, 0.02),          # over it
        "resnet50": _runs(9.0, 0.74, 0.5),             # within 1.5 x
        "vgg19": _runs(9.0, 0.76, 0.5, from_index=False, correct=False),
    }))
    assert rows["squeezenet"].endswith("| yes |") and rows["shufflenet"].endswith("| no |")
    assert rows["resnet50"].endswith("| yes |") and rows["vgg19"].endswith("| no |")
    assert "missed the index" in rows["vgg19"] and "wrong output" in rows["vgg19"]


def test_cold_total_judged_over_all_models_only():
    some = first_call.table({"squeezenet": _runs(4.0, 0.1, 0.1)})
    assert "not judged" in some
    every = first_call.table({name: _runs(1.5, 0.1, 0.1) for name in first_call.MODELS})
    assert "13.50 s" in every and ": not met)" in every
    fast = first_call.table({name: _runs(1.0, 0.1, 0.1) for name in first_call.MODELS})
    assert ": met)" in fast
