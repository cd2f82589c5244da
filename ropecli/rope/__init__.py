"""The numpy core, at the bottom of the stack: RoPE geometry, the scaling methods behind one registry, schedules, a
model's shipped schedule and position temperature, the target and its one k rule, and the freqs/digits analysis.
Imports nothing from ropecli but `errors`; never torch (a contract in pyproject.toml)."""
