"""Layer 4: pictures (matplotlib, imported only here) and advise's report.md."""
