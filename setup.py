"""Install primus-ext: ``pip install -e .`` (add ``[dev]`` for the tests, ``[agent]`` for the LLM tuner).

torch is pinned to the CPU-installable 2.13.0 in CI (.ci/run); the requirement here admits later
releases for GPU machines.
"""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="primus-ext",
    version="0.1.0",
    description="Hybrid projection and auto-tuning for Megatron-core / Primus LLM training",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["primus_ext", "primus_ext.*"]),
    package_data={"primus_ext": ["hardware/profiles/*.yaml", "hardware/families.yaml", "hardware/kernel_curves.yaml",
                                 "hardware/host_time.yaml",
                                 "launcher/megatron_cli/flags.json",  # Megatron-LM's flags per release (generated)
                                 "py.typed"]},
    include_package_data=True,
    # Bounds: what changes behaviour under us is held to the releases the suite passes with (tested:
    # PyYAML 6.0.4, numba 0.68.1, matplotlib 3.11.2, scipy 1.17.1, ruamel.yaml 0.19.1, litellm 1.110.2,
    # optuna 5.1.0, ruff 0.17.6); widen a bound after the suite passes on the newer release.
    install_requires=[
        "torch>=2.4",
        "megatron-core>=0.16.1",
        "numpy>=1.26,<3",
        "numba>=0.61,<0.69",  # the batch projection's compiled schedule loop (model/pipeline/batch.py)
        "PyYAML>=6.0.1,<6.1",  # safe_yaml's bounds sit on its parser (6.0.4 scans with a nesting bound of its own)
        "ruamel.yaml>=0.18,<0.20",  # the recipe rewrite keeps comments and layout (recipe/yaml_edit.py)
        "matplotlib>=3.7,<3.12",  # the report's timeline PNG (report/timeline_png.py)
        "scipy>=1.11,<1.18",  # calibration's bounded least squares, verify-top's Spearman rank correlation
    ],
    extras_require={
        "gpu": ["transformer-engine[pytorch]>=2.0"],
        "agent": ["litellm==1.110.2", "optuna>=4.0,<6",
                  "httpx>=0.27,<0.30"],  # the LLM reply read with a byte cap (tune/llm_http.py)
        "dev": ["pytest>=8,<10", "hypothesis>=6.100,<7", "ruff>=0.6,<0.18", "xmlschema>=3.0,<5",
                "jsonschema>=4.18,<5"],
    },
    entry_points={"console_scripts": ["primus-ext=primus_ext.cli:main"]},
)
