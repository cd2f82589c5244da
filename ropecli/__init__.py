"""ropecli: choose how to stretch a RoPE language model's context window without fine-tuning.

The numerical core (`geometry`, `schedules`, `digits`, `factor_files`) is pure numpy; torch and
transformers are imported only by the modules that load and run models (`ropecli.model`).
"""

__version__ = "0.1.0"
