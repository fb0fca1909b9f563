"""Why the culprit is slower: its torch profile against its parent's, per decode step
(``trace``: the Chrome-trace reader; ``stats``: the run-to-run spread test; ``diff``: the
profile diff; ``envdiff``: the two endpoints' environments; ``launch``: the one place a
profiled server is started; ``run``: ``vllm-bisect explain``; ``plot``: its plot;
``report_section``: its section of result.json and the report, the model and its render).
See docs/explain.md."""
