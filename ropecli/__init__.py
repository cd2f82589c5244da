"""ropecli: choose how to stretch a RoPE language model's context window without fine-tuning.

Layers, one folder each (docs/ARCHITECTURE.md): `rope` (numpy only) < `models` (torch) < `evaluation`
< `export` | `report` < `tuning` < `cli`; each imports only from the layers below it.
"""

__version__ = "0.1.0"
