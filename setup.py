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
    package_data={"primus_ext": ["hardware/profiles/*.yaml", "hardware/families.yaml", "py.typed"]},
    include_package_data=True,
    install_requires=[
        "torch>=2.4",
        "megatron-core>=0.16.1",
        "numpy>=1.26",
        "numba>=0.61",  # the batch projection's compiled schedule loop (model/pipeline/batch.py)
        "PyYAML>=6.0",
        "ruamel.yaml>=0.18",
        "matplotlib>=3.7",  # the report's timeline PNG (report/timeline_png.py)
    ],
    extras_require={
        "gpu": ["transformer-engine[pytorch]>=2.0"],
        "agent": ["litellm==1.110.2", "optuna>=4.0"],
        "dev": ["pytest>=8", "hypothesis>=6.100", "ruff>=0.6", "xmlschema>=3.0", "jsonschema>=4.18"],
    },
    entry_points={"console_scripts": ["primus-ext=primus_ext.cli:main"]},
)
