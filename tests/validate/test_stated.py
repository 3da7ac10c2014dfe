"""A fitted efficiency block written into a profile keeps what the profile states as measured."""

from primus_ext.specs import Efficiency
from primus_ext.validate.stated import unmeasured, with_measured


def test_unmeasured_drops_what_the_profile_measured():
    eff = Efficiency(attention=0.41, measured=("attention",))
    assert unmeasured({"attention": 0.5, "hbm": 0.8}, eff) == {"hbm": 0.8}
    assert unmeasured({"attention": 0.5}, Efficiency()) == {"attention": 0.5}


def test_a_pooled_prior_written_into_a_profile_keeps_what_the_profile_measured():
    pooled = Efficiency(attention=0.5, gemm_max=0.45, calibration="pooled prior")
    profile = Efficiency(attention=0.41, measured=("attention",))
    written = with_measured(pooled, profile)
    assert written.attention == 0.41 and written.gemm_max == 0.45 and written.measured == ("attention",)
    assert written.calibration == ("pooled prior; attention 0.41 as measured (kept from the profile, in place of the "
                                   "prior's value)")
    assert with_measured(pooled, Efficiency()) == pooled
