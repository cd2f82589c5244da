"""Choosing, below the CLI alone: the objective and its guards, the optimizers, the one search engine (search and
search-b), the candidates, and the advise tournament. Free of the CLI: everything takes an evaluator."""
