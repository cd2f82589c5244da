"""A chosen schedule or map written where each runtime reads it (one module per runtime in `runtimes/`, found by the
registry), a map's transformers folder, verify's read-back, and the one function `export` and `advise` call (`plan`).
Above the evaluation (verify measures), beside `ropecli.report`, below tuning."""
