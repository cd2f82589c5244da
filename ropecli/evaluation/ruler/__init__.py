"""RULER's synthetic long-context tasks (Hsieh et al. 2024, NVIDIA/RULER) generated from the user's text:
`templates` (RULER's strings, verbatim), `builders` (one prompt of each kind), `generate` (prompts at a
length, tokenizer-exact and seeded), `scoring` (RULER's string match on a generated answer)."""
