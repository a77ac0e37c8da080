#!/usr/bin/env bash
# The wheel, not the editable install, is what users get: build it and check that it
# holds every module and data file of the source tree and that each module imports
# from the wheel's own copy (an editable install hides a package missing from
# pyproject's list).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# From a copy of the tree: setuptools would reuse a stale build/ beside the sources.
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 tar c | tar x -C "$work/src"
python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$work/src" >/dev/null
python -m zipfile -e "$work"/dist/midword-*.whl "$work/unpacked"
cd "$work"
PYTHONPATH="$work/unpacked" python - "$work/src" "$work/unpacked" <<'PY'
import importlib
import pathlib
import sys

source, unpacked = map(pathlib.Path, sys.argv[1:3])
layout = {"midword": "midword", "engine": "midword/engine", "completion": "midword/completion",
          "server": "midword/server", "grammars": "midword/grammars"}
missing = []
for top, installed in layout.items():
    for path in (source / top).rglob("*"):
        if path.suffix not in (".py", ".lark", ".json", ".md") or "__pycache__" in path.parts:
            continue
        if top == "midword" and path.parts[len(source.parts) + 1 : len(source.parts) + 2] == ("bench",) \
                and path.suffix not in (".py",):
            continue
        target = unpacked / installed / path.relative_to(source / top)
        if not target.exists():
            missing.append(str(path.relative_to(source)))
if missing:
    sys.exit("the wheel lacks: " + ", ".join(sorted(missing)))
modules = sorted(
    ".".join(p.relative_to(unpacked).with_suffix("").parts).removesuffix(".__init__")
    for p in (unpacked / "midword").rglob("*.py")
)
for name in modules:
    if name.endswith("__main__"):  # it would run its CLI
        continue
    module = importlib.import_module(name)
    where = pathlib.Path(module.__file__).resolve()
    if unpacked.resolve() not in where.parents:
        sys.exit(f"{name} imported from {where}, not from the wheel")
print(f"wheel check: {len(modules)} modules, every source file present")
PY
