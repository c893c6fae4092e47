#!/usr/bin/env bash
# Fetch the public test models listed in scripts/models.tsv into .cache/models/<name>.onnx.
#
# Each model comes out of an npm package tarball (`npm pack PKG@VER`), and its FULL
# sha256 is checked against the table. Idempotent: a cached file with the right hash is
# kept as is; a missing or corrupted one is (re)fetched. Exits non-zero on any mismatch.
#
# Usage: scripts/fetch_models.sh [NAME...]      (default: every model in the table)
# Env:   NPM_TARBALL_DIR  optional folder of already-downloaded tarballs (npm pack file
#                         names, e.g. ricky0123-vad-web-0.0.31.tgz) to use before npm.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
table="$root/scripts/models.tsv"
dest="$root/.cache/models"
mkdir -p "$dest"

sha256() {  # print the sha256 of file $1
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jiffy-models.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# tarball PKG@VER: print the path of that package's tarball, packing it once per run.
tarball() {
  local spec=$1 file
  # npm pack names @scope/name@1.2.3 as scope-name-1.2.3.tgz
  file=$(printf '%s' "${spec%@*}" | sed 's|^@||; s|/|-|')-${spec##*@}.tgz
  if [ ! -f "$tmp/$file" ]; then
    if [ -n "${NPM_TARBALL_DIR:-}" ] && [ -f "$NPM_TARBALL_DIR/$file" ]; then
      cp "$NPM_TARBALL_DIR/$file" "$tmp/$file"
    else
      echo "fetch_models: npm pack $spec" >&2
      (cd "$tmp" && npm pack --silent "$spec" >/dev/null) ||
        { echo "fetch_models: ERROR: 'npm pack $spec' failed" >&2; return 1; }
    fi
    [ -f "$tmp/$file" ] || { echo "fetch_models: ERROR: npm pack did not produce $file" >&2; return 1; }
  fi
  printf '%s\n' "$tmp/$file"
}

for n in "$@"; do  # names given on the command line must be in the table
  cut -f1 "$table" | grep -qxF -- "$n" || { echo "fetch_models: ERROR: unknown model $n" >&2; exit 1; }
done

fetched=0 kept=0
while IFS=$'\t' read -r name pkg path want _rest; do
  case "$name" in ''|'#'*) continue ;; esac
  if [ $# -gt 0 ]; then  # only the names given on the command line
    case " $* " in *" $name "*) ;; *) continue ;; esac
  fi
  out="$dest/$name.onnx"
  if [ -f "$out" ]; then
    have=$(sha256 "$out")
    if [ "$have" = "$want" ]; then kept=$((kept + 1)); continue; fi
    echo "fetch_models: $name: cached file has sha256 $have, want $want; re-fetching" >&2
  fi
  tgz=$(tarball "$pkg")
  rm -rf "$tmp/x" && mkdir "$tmp/x"
  tar -xzf "$tgz" -C "$tmp/x" "$path" ||
    { echo "fetch_models: ERROR: $path not found in $pkg" >&2; exit 1; }
  got=$(sha256 "$tmp/x/$path")
  if [ "$got" != "$want" ]; then
    echo "fetch_models: ERROR: sha256 mismatch for $name ($pkg:$path)" >&2
    echo "  expected $want" >&2
    echo "  got      $got" >&2
    exit 1
  fi
  # copy next to the target, then rename: never leave a half-written model behind
  cp "$tmp/x/$path" "$out.tmp.$$" && mv -f "$out.tmp.$$" "$out"
  echo "fetch_models: $name <- $pkg:$path" >&2
  fetched=$((fetched + 1))
done < "$table"

echo "fetch_models: $fetched fetched, $kept already cached, in $dest" >&2
