"""Calibration recovers a known efficiency from synthetic rows; LOMO never sees the held-out model."""

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.specs import Efficiency, ExecutionSpec, ModelSpec
from primus_ext.validate.efficiency_fit import (
    fit_by_gpu,
    fit_efficiency,
    fit_pooled,
)
from primus_ext.validate.offsets import workload_offset
from primus_ext.validate.runs import RunRow


def fake_projector(run):
    """Throughput proportional to gemm_max and weakly to attention (a stand-in for the projection)."""
    eff = run.system.gpu.efficiency
    return 1000.0 * eff.gemm_max * (0.8 + 0.2 * eff.attention) * run.model.num_layers / 10


def rows(truth: Efficiency, models=("A", "B", "C"), per_model=3):
    system = load_system("h100", 2)
    system = replace(system, gpu=replace(system.gpu, efficiency=Efficiency()))  # independent of the profile
    out = []
    for m_i, name in enumerate(models):
        model = ModelSpec(name=name, num_layers=10 + m_i, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                          num_query_groups=4, kv_channels=16, vocab_size=100)
        for k in range(per_model):
            run = RunRow(index=len(out), model_name=name, gpu="H100", num_gpus=16, precision_label="BF16",
                         measured_tokens_per_sec_per_gpu=1.0, model=model,
                         execution=ExecutionSpec(data_parallel_size=16, micro_batch_size=k + 1), system=system)
            truth_system = replace(system, gpu=replace(system.gpu, efficiency=truth))
            measured = fake_projector(replace(run, system=truth_system))
            out.append(replace(run, measured_tokens_per_sec_per_gpu=measured))
    return out


def product(run):
    """Throughput set by gemm_max * attention^2 only: a valley of equally good fits."""
    eff = run.system.gpu.efficiency
    return 1000.0 * eff.gemm_max * eff.attention ** 2


def product_rows():
    truth = Efficiency(gemm_max=0.9, attention=0.2)
    return [replace(r, measured_tokens_per_sec_per_gpu=product(
        replace(r, system=replace(r.system, gpu=replace(r.system.gpu, efficiency=truth))))) for r in rows(truth)]


def test_fit_recovers_the_true_gemm_efficiency():
    truth = Efficiency(gemm_max=0.62, attention=0.55)
    runs = rows(truth)
    fitted, loss = fit_efficiency(runs, fake_projector, Efficiency())
    # gemm_max and attention are not separately identifiable here; the product is.
    product = fitted.gemm_max * (0.8 + 0.2 * fitted.attention)
    assert product == pytest.approx(0.62 * (0.8 + 0.2 * 0.55), rel=0.01) and loss < 0.01


def test_fit_by_gpu_records_how_it_was_fitted_and_skips_small_sets():
    fits = fit_by_gpu(rows(Efficiency(gemm_max=0.5)), fake_projector, label="unit rows")
    efficiency, n, _ = fits["hopper"]  # H100 rows calibrate the Hopper family
    assert n == 9 and "9 H100 rows (3 models)" in efficiency.calibration and "unit rows" in efficiency.calibration
    assert fit_by_gpu(rows(Efficiency(), models=("A",), per_model=2), fake_projector) == {}


def test_pooled_prior_fits_all_families_together():
    hopper = rows(Efficiency(gemm_max=0.5))
    b200 = load_system("b200", 2)
    b200 = replace(b200, gpu=replace(b200.gpu, efficiency=Efficiency()))
    blackwell = [replace(r, index=100 + r.index, gpu="B200", system=b200,
                         measured_tokens_per_sec_per_gpu=r.measured_tokens_per_sec_per_gpu * 0.7 / 0.5)
                 for r in rows(Efficiency(gemm_max=0.5))]  # the same rows measured as if gemm_max were 0.7
    efficiency, n, loss = fit_pooled(hopper + blackwell, fake_projector, label="unit rows")
    per_family = fit_by_gpu(hopper + blackwell, fake_projector)
    product = efficiency.gemm_max * (0.8 + 0.2 * efficiency.attention)
    low, high = (per_family[f][0].gemm_max * (0.8 + 0.2 * per_family[f][0].attention) for f in ("hopper", "blackwell"))
    assert n == 18 and low < product < high and loss > 0.05  # one block cannot fit both families
    assert "pooled prior" in efficiency.calibration and "blackwell/hopper" in efficiency.calibration
    assert fit_pooled(hopper[:2], fake_projector) is None


def test_workload_offset():
    assert workload_offset(2.0, 1.6) == pytest.approx(1.25)
    with pytest.raises(ValueError):
        workload_offset(0.0, 1.0)


def test_one_run_offset_removes_a_constant_bias():
    from primus_ext.validate.offsets import one_run_offset
    from primus_ext.validate.run import validate_runs

    runs = rows(Efficiency(gemm_max=0.5))
    biased = validate_runs(runs, lambda run: 1.3 * fake_projector(run) * (1 + 0.01 * run.index))
    assert biased.summary.median_abs_error_pct > 25
    calibrated = one_run_offset(biased)
    assert calibrated.summary.median_abs_error_pct < 3 and calibrated.summary.n_projected == 9


def test_relative_parameter_keeps_its_ratio_and_bounds():
    """fp8_gemm_max is searched as a ratio to gemm_max: an FP8 GEMM never beats the peak ratio (2x)."""
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS, Param, _set, clip

    params = (Param(name="gemm_max", low=0.3, high=0.95),
              Param(name="fp8_gemm_max", low=0.5, high=1.0, relative_to="gemm_max"))
    start = Efficiency(gemm_max=0.4, fp8_gemm_max=0.6)  # ratio 1.5: outside the physical bound
    clipped = clip(start, params)
    assert clipped.gemm_max == 0.4 and clipped.fp8_gemm_max == pytest.approx(0.4)
    moved = _set(replace(start, fp8_gemm_max=0.32), params[0], 0.8, params)  # ratio 0.8 kept
    assert moved.gemm_max == 0.8 and moved.fp8_gemm_max == pytest.approx(0.64)
    fp8 = next(p for p in DEFAULT_PARAMS if p.name == "fp8_gemm_max")
    assert fp8.relative_to == "gemm_max" and fp8.high <= 1.0


def test_fit_never_returns_fp8_faster_than_the_peak_ratio():
    def fp8_loving(run):  # a projector whose rows want FP8 GEMMs at 1.5x the BF16 fraction of peak
        eff = run.system.gpu.efficiency
        return 1000.0 * eff.fp8_gemm_max / 0.75
    runs = rows(Efficiency())
    fitted, _ = fit_efficiency(runs, fp8_loving, Efficiency(gemm_max=0.5, fp8_gemm_max=0.5))
    assert fitted.fp8_gemm_max <= fitted.gemm_max * (1 + 1e-9)


def test_fitted_parameters_include_both_link_efficiencies_within_physical_bounds():
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS

    bounds = {p.name: (p.low, p.high) for p in DEFAULT_PARAMS}
    assert bounds["scaleup_link"][0] >= 0.6 and bounds["scaleout_link"][1] < 1.0
    assert all(0 < low < high for low, high in bounds.values())


def test_fit_depends_on_its_rows_not_on_the_profile_it_starts_from():
    """fit_by_gpu starts from the plain defaults: a profile already fitted on some rows (in cross-validation:
    on the held-out model's rows too) cannot steer the fit."""
    truth = Efficiency(gemm_max=0.62, attention=0.55)
    runs = rows(truth)
    near_truth = [replace(r, system=replace(r.system, gpu=replace(r.system.gpu, efficiency=truth))) for r in runs]
    far = Efficiency(gemm_max=0.31, attention=0.85, moe_layer_overhead_s=4e-3)
    far_start = [replace(r, system=replace(r.system, gpu=replace(r.system.gpu, efficiency=far))) for r in runs]
    a, b = fit_by_gpu(near_truth, fake_projector)["hopper"][0], fit_by_gpu(far_start, fake_projector)["hopper"][0]
    assert a == b


def test_polish_walks_the_valley_of_two_parameters_that_trade_off(monkeypatch):
    """Throughput set by gemm_max * attention only: every point of the curve gemm_max * attention = c fits, and
    the polish reaches it from the defaults where one coordinate pass does not."""
    from primus_ext.validate import efficiency_fit

    runs = product_rows()
    fitted, loss = fit_efficiency(runs, product, Efficiency())
    assert loss < 1e-4
    assert fitted.gemm_max * fitted.attention ** 2 == pytest.approx(0.9 * 0.2 ** 2, rel=2e-4)
    monkeypatch.setattr(efficiency_fit, "POLISH_EVALS", 0)
    assert fit_efficiency(runs, product, Efficiency())[1] > 10 * loss  # the coordinate pass alone stops short


def test_the_polish_keeps_a_tied_parameter_at_its_ratio_when_only_its_reference_moves():
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS, from_unit, to_unit

    gemm = [p for p in DEFAULT_PARAMS if p.name == "gemm_max"]
    start = Efficiency(gemm_max=0.8, fp8_gemm_max=0.6)
    moved = from_unit(start, gemm, [0.0], DEFAULT_PARAMS)
    assert moved.gemm_max == pytest.approx(0.30)
    assert moved.fp8_gemm_max / moved.gemm_max == pytest.approx(0.6 / 0.8)
    assert to_unit(from_unit(start, gemm, [0.25], DEFAULT_PARAMS), gemm) == pytest.approx([0.25])


def only_model_a(errors):
    """A loss that looks at model A's rows alone."""
    picked = [abs(e) for run, e in errors if run.model_name == "A"]
    return sum(picked) / len(picked)


def test_the_fit_minimises_the_loss_it_is_given():
    a = rows(Efficiency(gemm_max=0.4), models=("A",))
    b = [replace(r, index=r.index + 3, model_name="B") for r in rows(Efficiency(gemm_max=0.8), models=("A",))]
    default_fit, _ = fit_efficiency(a + b, fake_projector, Efficiency())
    a_fit, a_loss = fit_efficiency(a + b, fake_projector, Efficiency(), loss=only_model_a)
    assert a_fit.gemm_max * (0.8 + 0.2 * a_fit.attention) == pytest.approx(0.4 * (0.8 + 0.2 * 0.55), rel=0.01)
    assert a_loss < 0.01 and default_fit.gemm_max > a_fit.gemm_max + 0.1
    label = fit_by_gpu(a + b, fake_projector, loss=only_model_a)["hopper"][0].calibration
    assert "loss only_model_a" in label and "mean |log error|" not in label


def link_projector(run):
    """``fake_projector`` slowed, on multi-node rows (more than 8 GPUs) only, by a scale-out term: the NIC
    efficiency is told apart from the GEMM efficiency by the single-node rows."""
    eff = run.system.gpu.efficiency
    nic = 1.0 + 0.5 / eff.scaleout_link if run.num_gpus > 8 else 1.0
    return fake_projector(run) / nic


def _family(truth: Efficiency, gpu: str = "h100", offset: int = 0, models=("A", "B", "C")) -> list[RunRow]:
    """``rows`` on ``gpu`` (plain default efficiency), measured as ``link_projector`` with ``truth``; the
    first row of each model runs on one node (8 GPUs)."""
    system = load_system(gpu, 2)
    system = replace(system, gpu=replace(system.gpu, efficiency=Efficiency()))
    out = []
    for r in rows(Efficiency(), models=models):
        run = replace(r, index=offset + r.index, gpu=gpu.upper(), system=system,
                      num_gpus=8 if r.execution.micro_batch_size == 1 else 16)
        truth_run = replace(run, system=replace(system, gpu=replace(system.gpu, efficiency=truth)))
        out.append(replace(run, measured_tokens_per_sec_per_gpu=link_projector(truth_run)))
    return out


def _two_families() -> list[RunRow]:
    return (_family(Efficiency(gemm_max=0.5, scaleout_link=0.6))
            + _family(Efficiency(gemm_max=0.7, scaleout_link=0.8), "b200", offset=100))


def test_per_family_fits_recover_each_familys_nic_efficiency():
    apart = fit_by_gpu(_two_families(), link_projector, shared=())
    assert apart["hopper"][0].scaleout_link == pytest.approx(0.6, abs=0.03)
    assert apart["blackwell"][0].scaleout_link == pytest.approx(0.8, abs=0.03)
    assert "together" not in apart["hopper"][0].calibration


def test_the_nic_efficiency_is_fitted_once_on_every_family_and_held_in_each():
    fits = fit_by_gpu(_two_families(), link_projector)
    hopper, blackwell = fits["hopper"][0], fits["blackwell"][0]
    assert hopper.scaleout_link == blackwell.scaleout_link  # one value for the same NICs
    assert 0.62 < hopper.scaleout_link < 0.78  # between the two families' own values
    assert "scaleout_link" not in hopper.calibration.split(";")[0]  # not among the family's own parameters
    assert "fitted on the 18 rows of blackwell/hopper together" in blackwell.calibration
    # each family's GEMM efficiency still comes from its own rows
    assert hopper.gemm_max < blackwell.gemm_max


def test_the_shared_fit_ignores_families_too_small_to_fit():
    small = _family(Efficiency(gemm_max=0.5, scaleout_link=0.3), "mi300x", offset=200, models=("A",))[:2]
    with_small = fit_by_gpu(_two_families() + small, link_projector)
    assert "cdna3" not in with_small
    assert with_small["hopper"][0].scaleout_link == fit_by_gpu(_two_families(), link_projector)[
        "hopper"][0].scaleout_link


def test_no_shared_step_without_the_shared_parameter_or_a_second_family():
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS

    without = [p for p in DEFAULT_PARAMS if p.name != "scaleout_link"]
    fits = fit_by_gpu(_two_families(), link_projector, params=without)
    assert "together" not in fits["hopper"][0].calibration
    assert fits["hopper"][0].scaleout_link == Efficiency().scaleout_link  # neither fitted nor shared
    one = fit_by_gpu(_family(Efficiency(gemm_max=0.5, scaleout_link=0.6)), link_projector)
    assert list(one) == ["hopper"] and "together" not in one["hopper"][0].calibration
    assert one["hopper"][0].scaleout_link == pytest.approx(0.6, abs=0.03)  # fitted by the family itself


def test_a_shared_parameter_no_row_constrains_keeps_its_default_and_says_so():
    hopper = rows(Efficiency(gemm_max=0.5))
    b200 = load_system("b200", 2)
    b200 = replace(b200, gpu=replace(b200.gpu, efficiency=Efficiency()))
    blackwell = [replace(r, index=100 + r.index, gpu="B200", system=b200) for r in rows(Efficiency(gemm_max=0.7))]
    fits = fit_by_gpu(hopper + blackwell, fake_projector)  # fake_projector ignores the NIC
    assert fits["hopper"][0].scaleout_link == Efficiency().scaleout_link
    assert "scaleout_link not constrained by these rows (left at the default)" in fits["hopper"][0].calibration
    assert "together" not in fits["hopper"][0].calibration


def _stated(runs: list[RunRow], efficiency: Efficiency, gpu: str | None = None) -> list[RunRow]:
    """``runs`` (those on ``gpu`` when given) with their profile's efficiency set to ``efficiency``."""
    return [replace(r, system=replace(r.system, gpu=replace(r.system.gpu, efficiency=efficiency)))
            if gpu is None or r.gpu == gpu else r for r in runs]


def test_a_measured_parameter_is_kept_as_the_profile_states_it():
    """``Efficiency.measured`` (a kernel microbenchmark's value): the fit moves the other parameters around it and
    says so."""
    truth = Efficiency(gemm_max=0.62, attention=0.55)
    stated = Efficiency(attention=0.3, measured=("attention",))
    fitted = fit_by_gpu(_stated(rows(truth), stated), fake_projector)["hopper"][0]
    assert fitted.attention == 0.3 and fitted.measured == ("attention",)
    # gemm_max takes up what attention cannot (throughput ~ gemm_max * (0.8 + 0.2 attention))
    assert fitted.gemm_max * (0.8 + 0.2 * 0.3) == pytest.approx(0.62 * (0.8 + 0.2 * 0.55), rel=0.01)
    assert "attention 0.3 as measured (not fitted)" in fitted.calibration
    assert "attention" not in fitted.calibration.split(" on ")[0]  # not among the fitted parameters
    unstated = fit_by_gpu(rows(truth), fake_projector)["hopper"][0]
    assert unstated.attention != 0.3 and "as measured" not in unstated.calibration


def test_a_shared_parameter_measured_in_one_family_is_not_overwritten_there():
    def fits(value: float) -> dict:
        stated = Efficiency(scaleout_link=value, measured=("scaleout_link",))
        return fit_by_gpu(_stated(_two_families(), stated, gpu="B200"), link_projector)

    at_8, at_9 = fits(0.8), fits(0.9)
    assert at_8["blackwell"][0].scaleout_link == 0.8 and at_9["blackwell"][0].scaleout_link == 0.9
    # the shared value is Hopper's rows' alone: whatever Blackwell's profile states does not pull it
    assert at_8["hopper"][0].scaleout_link == at_9["hopper"][0].scaleout_link
    hopper, blackwell = at_8["hopper"][0].calibration, at_8["blackwell"][0].calibration
    assert "scaleout_link 0.8 as measured (not fitted)" in blackwell and "scaleout_link 0.6" not in blackwell
    assert f"scaleout_link {at_8['hopper'][0].scaleout_link:.4g} fitted on the 18 rows" in hopper


def test_profiles_of_one_family_stating_different_measured_values_are_refused():
    from primus_ext.errors import RecipeError

    runs = _stated(_two_families(), Efficiency(attention=0.4, measured=("attention",)), gpu="B200")
    b300 = load_system("b300", 2)
    b300 = replace(b300, gpu=replace(b300.gpu, efficiency=Efficiency(attention=0.5, measured=("attention",))))
    runs += [replace(r, index=300 + r.index, gpu="B300", system=b300) for r in runs if r.gpu == "B200"]
    with pytest.raises(RecipeError) as err:
        fit_by_gpu(runs, link_projector)
    assert "blackwell" in str(err.value) and "efficiency.measured" in str(err.value)


def test_a_parameter_left_out_of_the_fit_starts_at_its_plain_default_not_the_profile():
    """A calibration variant that does not fit a parameter must not keep the profile's value of it (fitted on
    every row, the held-out model's too, in cross-validation)."""
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS

    without = [p for p in DEFAULT_PARAMS if p.name != "scaleup_link"]
    profiled = _stated(rows(Efficiency(gemm_max=0.5)), Efficiency(scaleup_link=0.62))
    assert fit_by_gpu(profiled, fake_projector, params=without)["hopper"][0].scaleup_link == Efficiency().scaleup_link


def fp4_projector(run):
    """``fake_projector``, and FP4 rows scaled by ``fp4_fp8_ratio`` (a stand-in for FP4 GEMMs)."""
    eff = run.system.gpu.efficiency
    return fake_projector(run) * (eff.fp4_fp8_ratio if run.execution.precision == "fp4" else 1.0)


def test_fp4_rows_calibrate_only_the_fp4_ratio():
    truth = Efficiency(gemm_max=0.62, attention=0.55, fp4_fp8_ratio=0.8)
    plain = rows(truth)
    fp4 = [replace(r, index=100 + i, precision_label="NVFP4", execution=replace(r.execution, precision="fp4"))
           for i, r in enumerate(rows(truth, models=("D",), per_model=6))]
    fp4 = [replace(r, measured_tokens_per_sec_per_gpu=r.measured_tokens_per_sec_per_gpu * 0.8) for r in fp4]
    alone = fit_by_gpu(plain, fp4_projector)["hopper"][0]
    both = fit_by_gpu(plain + fp4, fp4_projector)["hopper"][0]
    # the BF16 rows' efficiencies are what they were without the FP4 rows; the ratio comes from the FP4 rows
    assert (both.gemm_max, both.attention) == (alone.gemm_max, alone.attention)
    assert alone.fp4_fp8_ratio == 1.0 and both.fp4_fp8_ratio == pytest.approx(0.8, abs=0.01)
    assert "fp4_fp8_ratio" in both.calibration.split(" on ")[0]


def test_hybrid_mamba_rows_are_projected_but_not_fitted():
    """A hybrid model's rows (its Mamba mixers priced analytically) do not move the GPU's fitted efficiencies,
    however far off they are."""
    truth = Efficiency(gemm_max=0.62, attention=0.55)
    plain = rows(truth)
    hybrid = [replace(r, index=200 + i, model=replace(r.model, hybrid_layer_pattern="M*" * 4),
                      measured_tokens_per_sec_per_gpu=r.measured_tokens_per_sec_per_gpu * 0.5)
              for i, r in enumerate(rows(truth, models=("D",), per_model=6))]
    alone = fit_by_gpu(plain, fake_projector)["hopper"][0]
    both = fit_by_gpu(plain + hybrid, fake_projector)["hopper"][0]
    assert (both.gemm_max, both.attention) == (alone.gemm_max, alone.attention)
