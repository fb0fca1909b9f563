"""After the culprit: which part of it (files, hunks), which dependency (pins, versions on the
package index), which knob (env vars, serve flags) flips the symptom.

``ddmin`` is pure delta debugging; ``patches`` turns a subset of a culprit's diff into a
content-addressed scratch commit; ``pins`` and ``pkgindex`` read dependency pins and the
versions an index offers; ``adapter`` binds the bisect core's verdict policy, tester,
measurer and store to the studies (and journals their trials); ``culprit`` (files, hunks),
``deps`` and ``knobs`` are the studies (their commands are
:mod:`vllm_bisect.cli.study_cmds`); ``studies`` binds them to a session; ``report_section``
owns their sections of result.json and the report (the models and their renders); ``offers``
says which to offer. Synthetic histories for them: :mod:`vllm_bisect.sim.study_history`.
"""
