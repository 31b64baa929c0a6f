#!/usr/bin/env bash
# Build accel's sdist and wheel from this clone, install the wheel with torch into a fresh
# virtual environment, and run the README's example from a folder outside the clone: what
# a user of the published distribution gets, not the editable install the tests use.
#
#   scripts/wheel-check.sh
#
# TORCH_SPEC: the torch to install beside the wheel (default torch==2.13.0, as the README).
# PYTHON: the interpreter the venvs are made from (default python3).
# Fails when the build prints a deprecation warning, when accel is imported from anywhere
# but the installed wheel, or when `accel --version` does not show the source's version.
# Its temporary folders (build venv, test venv, project) are removed on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Nothing of the clone on the path: with src/ there, pip could take an egg-info in it
# (an editable install writes one) for an installed accel-workspace and skip the wheel.
unset PYTHONPATH PYTHONHOME

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)

fail() {
    echo "wheel-check: $*" >&2
    exit 1
}

# The version and distribution name the wheel must carry, read from the source.
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/src/accel/_version.py")
distribution=$(sed -n 's/^DISTRIBUTION = "\(.*\)"$/\1/p' "$root/src/accel/_version.py")
[ -n "$version" ] && [ -n "$distribution" ] || fail "no version or DISTRIBUTION in _version.py"

# The files git would ship (tracked, and new ones not ignored), copied out, so the build
# sees no venv or egg-info of the clone and writes nothing into it.
tree="$scratch/tree"
mkdir "$tree"
git -C "$root" rev-parse --is-inside-work-tree >/dev/null || fail "$root is not a git clone"
(
    cd "$root"
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' path; do
            # a tracked file deleted in the work tree is not shipped
            if [ -e "$path" ] || [ -L "$path" ]; then
                cp --parents --no-dereference -- "$path" "$tree/"
            fi
        done
)

# Build the sdist, then the wheel from it (so the sdist is proven complete too), with
# `build` in a venv of its own: the test venv below holds only torch and the wheel.
"$PYTHON" -m venv "$scratch/build-venv"
"$scratch/build-venv/bin/pip" install -q build
# PYTHONDONTWRITEBYTECODE makes setuptools warn that it skips byte-compiling: not ours.
env -u PYTHONDONTWRITEBYTECODE "$scratch/build-venv/bin/python" -m build \
    --outdir "$scratch/dist" "$tree" >"$scratch/build.log" 2>&1 ||
    { cat "$scratch/build.log" >&2; fail "the build failed"; }
if grep -qi 'deprecat' "$scratch/build.log"; then
    cat "$scratch/build.log" >&2
    fail "the build printed deprecation warnings (above)"
fi
wheels=("$scratch"/dist/*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || fail "expected one wheel in $scratch/dist"
wheel=${wheels[0]}
echo "wheel-check: built $(basename "$wheel")"

# A fresh venv with torch and the wheel, nothing else of this clone.
venv="$scratch/venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/pip" install -q "$TORCH_SPEC" "$wheel"

# From a project folder outside the clone, with a HOME of its own and the venv first on
# PATH: the README's example, then the run it made.
project="$scratch/project"
mkdir -p "$project" "$scratch/home"
cp "$root/examples/train.py" "$project/"
(
    cd "$project"
    export HOME="$scratch/home" XDG_CONFIG_HOME="$scratch/home/.config"
    export XDG_CACHE_HOME="$scratch/home/.cache" PATH="$venv/bin:$PATH"
    found=$(command -v accel || true)
    [ "$found" = "$venv/bin/accel" ] || fail "accel is '$found', not the venv's"
    where=$(python -c 'import accel; print(accel.__file__)')
    case "$where" in
        "$venv"/*) ;;
        *) fail "import accel found $where, not the installed wheel" ;;
    esac
    installed=$(python -c 'import sys; from importlib.metadata import version
print(version(sys.argv[1]))' "$distribution")
    [ "$installed" = "$version" ] || fail "$distribution is installed as $installed, not $version"
    shown=$(accel --version)
    [ "$shown" = "accel $version" ] || fail "accel --version printed '$shown', not 'accel $version'"
    accel launch -n 2 train.py
    accel runs
)
echo "wheel-check: $distribution $version from the wheel ran the README's example" \
    "in $(($(date +%s) - start)) s"
