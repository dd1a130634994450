"""`testbed explore`: seeded fault schedules on the simulator, judged in-process, failures
shrunk to minimal reproducers (docs/explore.md).

generators.py draws a seed's schedule, case.py turns (spec, seed, schedule) into a run and
its verdict, pool.py runs seeds in worker processes or Spark tasks, shrink.py minimises a
failing schedule, report.py writes seeds.parquet and index.html, session.py ties them up.
This package must stay light to import: workers activate the compiled simulator
(nodes/fastpath.py) before they import it.
"""
