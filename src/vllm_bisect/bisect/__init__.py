"""The bisect core, in layers (each imports only its own layer and the ones below;
``tests/test_imports.py``'s ``BISECT_LAYERS``):

1. the range and its terms (``range.py``, ``release.py``, ``terms.py``: old/new and the
   ``Role`` a commit is judged in), the events a run tells, the forecast's arithmetic
   (``forecast.py``), result.json's endpoint environments (``endpoint_doc.py``), the memory
   symptom's probe step (``memory_step.py``);
2. the verdict policies (``policies/``);
3. where a bisect's state lives (``state/``);
4. measuring a commit (``measurement/``) and the session's wiring (``bench.py``,
   :func:`~vllm_bisect.bisect.bench.open_bench`: prefetcher -> evaluator -> executor);
5. judging a commit (``tester.py``: ``Tester.run_trials()`` / ``after_server()`` run its
   trial, ``Tester.record()`` judges it, purely, and calls the policy's ``learn()``: the one
   place a commit is judged; a commit's repeated runs replayed on resume: ``reruns.py``);
6. the searches (``search/``, the endpoints settled by ``search/endpoints.py``'s
   ``settle()``), the lazy good endpoint (``recheck.py``), the rest checks (``rest.py``) and
   what a run tells (``forecast_events.py``, ``forecast_spread.py``, ``endpoint_env.py``);
7. the composition root (``core.py``, :func:`~vllm_bisect.bisect.core.open_core`) and the one
   session opener (``wiring.py``, :func:`~vllm_bisect.bisect.wiring.open_session`: builder,
   bench, result cache and core, opened and closed together for every way in): above the
   searches, which are handed the tester it assembles and never import it;
8. the ways in: ``driver.py`` (one search), ``multi.py`` (one per symptom; the steps it
   finds in ``culprits.py``), ``run_session.py`` (a ``vllm-bisect run`` session) and ``hook.py``
   (``git bisect run``).
"""
