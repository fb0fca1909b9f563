#!/usr/bin/env bash
# Issue 53 on the GPU machine: scripts/gpu/run_issue.sh with issue 53's tag (.whl/i53.tar.part*,
# I53_* env) and jobs (session 24 also ran host-noise,host-explain; noise.py beside the driver).
# Copy both to .gpu/bin/ (git-ignored, carried); modes and usage: run_issue.sh.
ISSUE=53 ALL=host-cpint,spec-cp EXTRA=noise.py exec bash "$(dirname "$0")/run_issue.sh" "$@"
