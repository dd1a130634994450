"""Nightly experiments (`testbed nightly`): the catalogue in `experiments/nightly/`, the runner,
the Parquet history, regression and flakiness detection, and the nightly.html trend report."""
