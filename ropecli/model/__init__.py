"""Everything that needs torch and transformers: loading models, patching their RoPE, scoring text."""
