"""The face: a run and the store's rows rendered for people (`terminal`: rich table, JSON,
CSV, progress bar; `html`: one run as a self-contained page)."""
