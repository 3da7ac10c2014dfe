"""``run.errors_by_model``: each model's bias and spread, worst first, skipped rows left out."""

import pytest

from primus_ext.validate.run import RowResult, errors_by_model, summarize


def _row(i: int, model: str, error: float | None) -> RowResult:
    return RowResult(index=i, model=model, gpu="H100", num_gpus=8, precision="bf16",
                     measured_tokens_per_sec_per_gpu=100.0,
                     projected_tokens_per_sec_per_gpu=None if error is None else 100.0 + error,
                     error_pct=error, skipped_reason="" if error is not None else "no arch")


def test_errors_by_model_bias_spread_and_order():
    rows = [_row(0, "a", -4.0), _row(1, "a", -2.0), _row(2, "a", +10.0),
            _row(3, "b", -30.0), _row(4, "b", -20.0), _row(5, "c", None)]
    by = errors_by_model(rows)
    assert list(by) == ["b", "a"]  # worst median |error| first; "c" has no projected row
    assert by["a"].n == 3
    assert by["a"].median_error_pct == pytest.approx(-2.0)  # the signed median: the bias
    assert by["a"].median_abs_error_pct == pytest.approx(4.0)  # the median of |error|, not |median|
    assert by["a"].max_abs_error_pct == pytest.approx(10.0)
    assert by["b"].median_error_pct == pytest.approx(-25.0)
    assert by["b"].median_abs_error_pct == pytest.approx(25.0)


def test_summary_carries_the_by_model_table():
    rows = [_row(0, "a", 5.0), _row(1, "b", -1.0), _row(2, "b", None)]
    s = summarize(rows)
    assert set(s.by_model) == {"a", "b"} and s.by_model["b"].n == 1


def test_summary_mean_abs_log_error_and_rows_above_20_pct():
    import math

    rows = [_row(0, "a", 25.0), _row(1, "a", -20.0), _row(2, "b", 100.0), _row(3, "b", None)]
    s = summarize(rows)
    expected = (math.log(1.25) + abs(math.log(0.8)) + math.log(2.0)) / 3
    assert s.mean_abs_log_error == pytest.approx(expected)
    assert s.n_above_20_pct == 2  # 25 % and 100 %; exactly 20 % is not above
