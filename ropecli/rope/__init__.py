"""Layer 1, numpy only: RoPE geometry, the scaling methods behind one registry, `Spec` (a method with
its parameters and the one target-k rule), the standard methods, and the freqs/digits analysis.
Imports nothing from ropecli but `errors`; never torch."""
