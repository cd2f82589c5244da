"""Layer 4: choosing. The objective and its guards, the optimizers, the one search engine (search and
search-b), and the advise tournament. Free of the CLI: everything takes an evaluator."""
