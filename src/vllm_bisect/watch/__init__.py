"""``vllm-bisect watch``: change points in a series of benchmark results, and a bisect of
each window that matters.

- :mod:`.series`: read a series (bench serve results, CSV, JSON lines, a session);
- :mod:`.detect`: change points (Apache Otava), the run-to-run spread, location windows (pure);
- :mod:`.plan`: findings with the commits that bound them, and one bisect spec per window;
- :mod:`.render`: the Markdown table and the HTML page with the plots.
"""
