"""The machine: one GPU type's datasheet figures, its efficiency parameters, and the cluster shape.

Units are SI in the fields' names (``_tflops``, ``_bytes``, ``_bytes_per_s``). Profiles live as YAML
data with sources in ``primus_ext/hardware/profiles/``; ``primus_ext.hardware`` loads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Named, calibratable efficiency parameters of one GPU type (dimensionless unless noted).

    Defaults are deliberately plain starting points; calibrated values are stored in the profile
    YAML with how they were fitted. See docs/DESIGN.md "Sources of error".
    """

    gemm_max: float = 0.75
    """Asymptotic fraction of dense peak reached by large GEMMs."""
    gemm_half_size_flops: float = 2.0e9
    """GEMM FLOPs at which efficiency reaches half of ``gemm_max`` (size-dependent roll-off)."""
    fp8_gemm_max: float = 0.55
    """Asymptotic fraction of the *FP8* dense peak reached by large FP8 GEMMs. Lower than
    ``gemm_max``: scaling-factor handling and casts keep FP8 GEMMs further from their (2x) peak;
    NVIDIA's FP8 recipes report ~1.3-1.5x end-to-end over BF16, not 2x (Megatron-Bridge tables)."""
    fp4_fp8_ratio: float = 1.0
    """Large FP4 GEMMs reach this fraction of ``fp8_gemm_max`` (of the *FP4* peak): block-scale handling per 16 / 32
    elements keeps them at most as close to their peak as FP8 GEMMs. 1 = as close, the uncalibrated default;
    fitted (bounded to [0.5, 1], ``validate.efficiency_fit``) only where FP4 rows exist."""
    attention_sfu_exp_per_s: float = 0.0
    """Exponentials per second of the special-function units of the GPUs ``attention`` was calibrated on; 0 = this
    GPU's own ``GPUSpec.sfu_exp_per_s``. A GPU that inherits its family's efficiencies with faster SFUs (B300 /
    GB300 from B200 / GB200) runs the softmax share of attention faster by that ratio (``roofline``)."""
    fp8_rowwise_ratio: float = 1.0
    """Row-wise scaled FP8 GEMMs (per-row scales applied in the epilogue, with their separate quantisation
    kernels: torchao's ``rowwise`` float8 recipe) reach this fraction of ``fp8_gemm_max``. 1 = as fast as
    per-tensor scaling, the uncalibrated default; fitted only where rows with that recipe exist."""
    moe_layer_overhead_s: float = 2.0e-4
    """Fixed cost per MoE layer per pass (seconds): router top-k, the dropless dispatcher's token-count
    synchronisation, permutation and grouped-GEMM launches, beyond their FLOP / byte cost. The default
    is a starting point of the order of ~40 kernel launches at ~5 us; calibrated profiles replace it."""
    attention: float = 0.55
    """Fraction of dense peak reached by fused (flash) attention."""
    hbm: float = 0.80
    """Fraction of HBM bandwidth reached by memory-bound kernels."""
    scaleup_link: float = 0.75
    """Bus-bandwidth fraction reached by collectives inside the scale-up domain."""
    scaleout_link: float = 0.70
    """Bus-bandwidth fraction of the NIC reached by collectives across scale-up domains."""
    overlap: float = 0.90
    """Fraction of an overlapped collective actually hidden behind compute."""
    host_factor: float = 0.0
    """The training host's time for megatron-core's per-layer Python and dispatch over the CPU it was measured on
    (``hardware/host_time.yaml``): 1 = as fast. 0 = not stated, the host floor is not applied (``project`` still says
    what it would add at 1); a profile states it from a measurement on the training host
    (``benchmarks/gpu_kernel_sweep.py --host``). Not fitted on published runs (``validate.efficiency_fit``)."""
    kernel_overhead_s: float = 2.0e-5
    """Launch / framework overhead per layer per pass, seconds."""
    collective_latency_s: float = 1.0e-5
    """Alpha term of a collective step inside the scale-up domain, seconds."""
    network_latency_s: float = 5.0e-6
    """Additional alpha per step across scale-up domains, seconds."""
    band: float = 0.10
    """Relative range each efficiency is moved down and up for the projection's band (``projection.project``): 0.10
    where a family's calibration rests on many rows; wider where it rests on few (an AMD board's held-out error,
    ``validate.amd``), so a projection on it is never printed with the confidence of a well-sampled family."""
    measured: tuple[str, ...] = ()
    """Parameters whose values were measured on the hardware (kernel microbenchmarks) rather than fitted to
    end-to-end runs: ``validate --fit`` and its cross-validation keep them as the profile states them."""
    calibration: str = "uncalibrated defaults"
    """How these values were obtained (fit set, date, command)."""


FORMATS = ("fp8", "mxfp8", "nvfp4", "mxfp4")
"""Low-precision GEMM formats a profile can state (``hardware/families.yaml`` says what each is)."""
FP8_LAYOUTS = ("tn", "any")


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a GPU's tensor cores can run: data from ``hardware/families.yaml`` (per generation) or the profile's own
    ``capabilities:`` block, validated on load (``hardware.capabilities``). Code asks these, never a family name."""

    formats: tuple[str, ...] = ()
    """Low-precision GEMM formats beyond bf16 / fp16 / fp32 (``FORMATS``)."""
    fp8_layouts: str = "tn"
    """``any``: FP8 GEMMs take every operand layout (no transposed fp8 weight copy); ``tn``: TN only."""
    device_arch: int = 0
    """Major device version as torch reports it (Megatron-LM's ``get_device_arch_version``)."""


@dataclass(frozen=True, kw_only=True)
class AttentionCurve:
    """Fused attention's time in one direction on a GPU family, fitted to public kernel measurements
    (``hardware/kernel_curves.yaml``, ``benchmarks/fit_kernel_curves.py``):
    ``work (keys + row_keys) / (peak * efficiency(head_dim)) + latency_s``, where ``work`` is the matmul FLOPs per
    key of every query row (forward 2 BMMs, backward 2.5x that) and ``keys`` the mean unmasked keys per query."""

    head_dims: tuple[int, ...]
    """The query/key head dims measured (each runs a kernel of its own); ascending."""
    efficiencies: tuple[float, ...]
    """Fraction of the dense BF16 peak at each of ``head_dims``."""
    row_keys: float
    """Per-row work in key-equivalents: the partly masked tiles on the diagonal, the softmax rescale, the epilogue."""
    latency_s: float
    """Fixed time per kernel call, seconds."""


@dataclass(frozen=True, kw_only=True)
class GroupedCurve:
    """A grouped GEMM's time in one direction and precision on a GPU family (``hardware/kernel_curves.yaml``):
    ``G`` GEMMs of ``m`` rows take ``2 G m n k (x2 backward) / (peak * efficiency * m / (m + m_half)) + latency_s``."""

    efficiency: float
    """Fraction of the precision's dense peak with many rows per group."""
    m_half: float
    """Rows per group at half that efficiency (partial tiles, too few tiles for the compute units)."""
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class HostTime:
    """Host seconds of one layer pass: megatron-core's Python, autograd and torch's dispatcher between kernels, with
    the operators each pass dispatches (``measure.host``; ``hardware/host_time.yaml``)."""

    fwd_s: float
    bwd_s: float
    fwd_ops: int = 0
    bwd_ops: int = 0


@dataclass(frozen=True, kw_only=True)
class KernelCurves:
    """The kernel curves of one GPU family (``hardware/kernel_curves.yaml``); ``None`` fields: no public data."""

    family: str
    attention_fwd: AttentionCurve | None = None
    attention_bwd: AttentionCurve | None = None
    grouped: tuple[tuple[str, GroupedCurve], ...] = ()
    """``("<precision>_<fwd|bwd>", curve)`` pairs (``bf16_fwd``, ``fp8_bwd``, ...): the grouped GEMMs measured."""
    sources: str = ""

    def grouped_curve(self, precision: str, direction: str) -> GroupedCurve | None:
        key = f"{precision}_{direction}"
        return next((c for k, c in self.grouped if k == key), None)


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One accelerator type, from its vendor datasheet."""

    name: str
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    scaleup_bandwidth_bytes_per_s: float
    """Scale-up (NVLink / Infinity Fabric) bandwidth per GPU per direction."""
    scaleup_domain: int
    """GPUs sharing the scale-up fabric: 8 for HGX/MI300X boards, 72 for NVL72."""
    nic_bandwidth_bytes_per_s: float
    """Scale-out NIC bandwidth per GPU per direction."""
    gpus_per_node: int = 8
    family: str = ""
    """Tensor/matrix-core generation (hopper, blackwell, cdna3, cdna4): GPUs of one family share
    calibrated efficiency fractions (same silicon architecture, different clocks / memory)."""
    vendor: str = ""
    """``amd`` / ``nvidia``: an AMD board is calibrated on AMD runs only, each board on its own rows
    (``validate.amd``), never on another vendor's fit where AMD rows exist."""
    tdp_w: float = 0.0
    fp4_dense_tflops: float = 0.0
    """Dense FP4 (NVFP4 / MXFP4) peak; 0 = no FP4 tensor cores: FP4 recipes are refused there."""
    sfu_exp_per_s: float = 0.0
    """Exponentials per second of the special-function units (attention's softmax); 0 = not stated."""
    outside_allocator_bytes: float = 0.0
    """Device memory a training process holds outside torch's caching allocator on this GPU's software stack
    (runtime context, kernel images, collective-library buffers), measured as device used - max reserved; 0 = not
    measured: ``memory.rank.OUTSIDE_ALLOCATOR_BYTES``, the CUDA estimate."""
    inherits_efficiency_from: str = ""
    """The profile whose calibrated efficiencies this GPU uses because no measured run of its own exists (B300 ->
    B200): printed beside every projection on it; its SFU rate is ``Efficiency.attention_sfu_exp_per_s``."""
    sources: str = ""
    efficiency: Efficiency = field(default_factory=Efficiency)
    kernel_curves: KernelCurves | None = None
    """Its family's kernel curves (``hardware.curves``); ``None``: no public kernel data, the roofline's laws."""
    capabilities: Capabilities | None = None
    """What its tensor cores run; ``None``: not stated (no ``family``): format checks then let a recipe through and
    the memory model takes the conservative answer (an fp8 weight's transposed copy kept)."""

    fp8_any_layout: bool = field(init=False, repr=False, compare=False)
    """FP8 GEMMs take every operand layout (False when not stated: the conservative memory answer). Derived from
    ``capabilities`` once: the memory pre-filter reads it per configuration."""

    def __post_init__(self) -> None:
        any_layout = self.capabilities is not None and self.capabilities.fp8_layouts == "any"
        object.__setattr__(self, "fp8_any_layout", any_layout)

    def runs(self, fmt: str) -> bool | None:
        """Whether its tensor cores run number format ``fmt`` (``FORMATS``); ``None`` when the profile does not say."""
        return None if self.capabilities is None else fmt in self.capabilities.formats


    @property
    def device_arch(self) -> int:
        """Major device version (0 when not stated)."""
        return 0 if self.capabilities is None else self.capabilities.device_arch

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for the GEMM precision (fp8 falls back to bf16 when not supported). fp4 on a GPU without an
        FP4 peak is refused before a projection starts (``model.fp4.fp4_problem``); here it raises ``ValueError``."""
        if precision == "fp8" and self.fp8_dense_tflops > 0:
            return self.fp8_dense_tflops
        if precision == "fp4":
            if self.fp4_dense_tflops <= 0:
                raise ValueError(f"{self.name} has no FP4 tensor cores (no fp4_dense_tflops in its profile)")
            return self.fp4_dense_tflops
        if precision == "fp32":
            return self.bf16_dense_tflops / 2
        return self.bf16_dense_tflops


@dataclass(frozen=True, kw_only=True)
class SystemSpec:
    """A cluster: ``num_nodes`` nodes of ``gpu.gpus_per_node`` GPUs of one type."""

    gpu: GPUSpec
    num_nodes: int = 1
    name: str = ""
    """Profile name the cluster came from (e.g. ``mi300x``)."""

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpu.gpus_per_node

    @property
    def scaleup_domain(self) -> int:
        """GPUs reachable over the scale-up fabric ("intra-node" for the models)."""
        return min(self.gpu.scaleup_domain, self.world_size)
