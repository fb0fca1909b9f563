"""Measuring a commit: the evaluator (``evaluate.py``: prepare, serve through the runtime's
launchers, probe) and its probe steps (``probe_steps.py``); where evaluations run (inline,
local and Ray executors: ``executor.py``, ``ray_executor.py``); the measurer (``measurer.py``:
workers, retries, server starts, prefetch)."""
