"""The GitHub stand-in of the bot tests: ``vllm_bisect.sim.github`` (`vllm-bisect bot try`
runs the bot against the same one)."""

from __future__ import annotations

from vllm_bisect.sim.github import Comment, GitHubStandIn

__all__ = ["Comment", "GitHubStandIn"]
