"""`testbed serve`: every run, exploration and nightly trend report under some folders, in the
browser, read-only (docs/serve.md). The application and its routes are in app.py; the runs
table in runs.py (found.py finds what is under the folders), explorations in explorations.py,
the comparison in compare.py, the live view in live.py, the files served in files.py, who may
read them in access.py."""
