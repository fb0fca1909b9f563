"""generate_history (one git fast-import): every commit a real change with the planted files,
the planted commits where the plan says, a clean checkout of the head, UTC dates 3 h apart."""

from __future__ import annotations

from pathlib import Path

import git

from vllm_bisect.sim.history import CAP_SUBJECT, SLOW_SUBJECT, HistoryPlan, _files, generate_history


def test_every_commit_holds_its_planned_files(tmp_path: Path) -> None:
    plan = HistoryPlan(n_commits=12, cap_at=5, slow_at=8, unbuildable=(3,), kernel_at=10)
    h = generate_history(tmp_path / "vllm", plan)
    repo = git.Repo(h.path)
    commits = list(repo.iter_commits("main", reverse=True))
    assert [c.hexsha for c in commits] == list(h.shas) and len(h.shas) == 13
    assert [len(c.parents) for c in commits] == [0] + [1] * 12
    assert repo.head.reference.name == "main" and not repo.is_dirty(untracked_files=True)
    # no checkout in its reflog: `@{-1}` (the branch checked out before) names nothing
    assert repo.git.rev_parse("--verify", "--quiet", "@{-1}", with_exceptions=False) == ""
    for i, c in enumerate(commits):
        for rel, text in _files(plan, i).items():
            assert (c.tree / rel).data_stream.read().decode() == text, (i, rel)
        if i:
            assert c.stats.files, i  # a real change
            assert c.committed_date - commits[i - 1].committed_date == 3 * 3600
        assert c.author.name == c.committer.name == "vLLM Dev"
        assert c.committer_tz_offset == 0 and c.message.endswith(
            "\n\nSigned-off-by: vLLM Dev <dev@vllm.invalid>\n")
    assert h.planted == {"length": h.shas[5], "itl": h.shas[8], "kernel": h.shas[10]}
    assert commits[5].summary.startswith(CAP_SUBJECT)
    assert commits[8].summary.startswith(SLOW_SUBJECT)
    assert h.unbuildable == (h.shas[3],)
    for rel, text in _files(plan, 12).items():  # the work tree is the head's
        assert (h.path / rel).read_text() == text
    # the same plan gives the same shas (the sessions and caches of tests key on them)
    assert generate_history(tmp_path / "again", plan).shas == h.shas
