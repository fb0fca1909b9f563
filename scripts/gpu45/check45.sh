#!/usr/bin/env bash
# Before the device calls of issue 45 (here, no device time): the parts are whole, every call
# fits the 64 MiB that travels, the scripts parse, and which driver the GPU machine will run.
set -u
cd "$(dirname "$0")/../.." || exit 2
fail=0
(cd .whl && sha256sum -c --quiet ../.gpu/bin/parts.sha256) && echo "parts: 7 whole" || { echo "parts: DAMAGED"; fail=1; }
bash -n .gpu/bin/run45.sh && bash -n .gpu/bin/run_issue.sh && bash -n .gpu/bin/keep.sh && echo "scripts: parse" || fail=1
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
bin=$(du -cb .gpu/bin | tail -1 | cut -f1)
state=$(du -cb .gpu/state 2>/dev/null | tail -1 | cut -f1)
part=$(ls -l .whl/i45.tar.part* | awk '{print $5}' | sort -n | tail -1)
limit=$((64 * 1024 * 1024))
for what in "carry call: tree + .gpu/bin + one part:$((tree + bin + part))" \
            "work call 1: tree + .gpu/bin + part6 + .gpu/state:$((tree + bin + part + ${state:-0}))" \
            "wait call: tree + .gpu/bin + .gpu/state:$((tree + bin + ${state:-0}))"; do
  n=${what##*:}; printf '%-50s %10d bytes (%s of %d)\n' "${what%:*}" "$n" \
    "$([ "$n" -lt $limit ] && echo ok || echo OVER)" $limit
  [ "$n" -lt $limit ] || fail=1
done
echo "tree that travels: $tree bytes (tracked + untracked-not-ignored)"
# the driver run_issue.sh will run: the copy in .gpu/bin when there, else the repository's
if [ -f .gpu/bin/gpu_source_run.py ]; then echo "driver: .gpu/bin/gpu_source_run.py"
else echo "driver: scripts/gpu_source_run.py"; fi
[ -n "$(git status --porcelain --untracked-files=all | grep '^??')" ] && \
  echo "note: untracked files travel too: $(git status --porcelain --untracked-files=all | grep -c '^??')"
exit $fail
