"""The search over a commit range: binary (``binary.py``), multisection on k workers
(``parallel.py``), Bayesian for flaky symptoms (``bayes_search.py``, ``bayes.py``), the model of
the range (``changepoint.py``; under the hook, ``changepoint_hook.py``; its servers and
conclusion, ``range_model.py``); the pure
stepping (``steps.py``, ``multisection.py``); the endpoints settled before it
(``endpoints.py``) and the culprit verified after it (``verify.py``)."""
