"""benchmarks/elementwise_rates.py: elementwise kernels' and eval batch norms' times by
operand count, dtype and size; checked on the CPU (the measurement wants a GPU)."""
import json

import pytest

from benchmarks import elementwise_rates
from fxroof.errors import FxroofError


def test_record_then_summary_on_a_cpu(tmp_path, capsys):
    out = tmp_path / "rates.json"
    assert elementwise_rates.main(["record", "--device", "cpu", "--out", str(out),
                                   "--dtypes", "fp32", "--log2-sizes", "10",
                                   "--norm-batch", "1"]) == 0
    found = json.loads(out.read_text())
    ops = {r["op"]: r for r in found["runs"] if r["kind"] == "elementwise"}
    assert set(ops) == set(elementwise_rates.OPS)
    # bytes moved: each operand read and the output written, 2^10 fp32 elements
    assert ops["fill_"]["bytes"] == 1024 * 4
    assert ops["relu_"]["bytes"] == 2 * 1024 * 4
    assert ops["addcmul"]["bytes"] == 4 * 1024 * 4
    assert all(r["seconds"] > 0 for r in found["runs"])
    for kind in ("batch_norm_eval", "bias_add"):
        runs = [r for r in found["runs"] if r["kind"] == kind]
        assert len(runs) == len(elementwise_rates.NORM_SHAPES) * len(elementwise_rates.LAYOUTS)
        assert runs[0]["bytes"] == 2 * 64 * 224 * 224 * 4  # (1, 64, 224, 224) read, written
    assert elementwise_rates.main(["summary", str(out)]) == 0
    assert "addcmul fp32        1024" in capsys.readouterr().out


def test_record_keeps_an_existing_file_and_summary_refuses_another_kind(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    with pytest.raises(FxroofError):
        elementwise_rates.main(["record", "--device", "cpu", "--out", str(kept)])
    assert kept.read_text() == "{}"
    with pytest.raises(FxroofError, match="not an elementwise_rates file"):
        elementwise_rates.main(["summary", str(kept)])
    run = {"kind": "elementwise", "dtype": "fp32", "elements": 4, "bytes": 32, "seconds": 0}
    kept.write_text(json.dumps({"benchmark": "elementwise_rates", "runs": [run]}))
    with pytest.raises(FxroofError, match="run 0's seconds is not a positive number"):
        elementwise_rates.main(["summary", str(kept)])
    kept.write_text(json.dumps({"benchmark": "elementwise_rates",
                                "runs": [{**run, "seconds": 1e-6, "bytes": "many"}]}))
    with pytest.raises(FxroofError, match="run 0's bytes is not a positive number"):
        elementwise_rates.main(["summary", str(kept)])
