#!/usr/bin/env bash
# Screenshots of the built docs in headless Chromium (Debian's `chromium` package), on a desktop and a phone-sized
# width, to look at what a reader sees: the home page, an algorithm page, MAPPO's API page and a results page.
#
#   sphinx-build -W docs docs/_build/html && bash scripts/docs_screenshots.sh [OUT_DIR]   # default docs/_build/shots
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
html=$root/docs/_build/html
out=${1:-$root/docs/_build/shots}
command -v chromium >/dev/null || { echo "docs_screenshots.sh: needs chromium (apt-get install chromium)" >&2; exit 2; }
mkdir -p "$out"
pages=(index.html algorithms/mappo.html _generated/generated/lit_marl.algorithms.MAPPO.html results/index.html)
for page in "${pages[@]}"; do
  [ -f "$html/$page" ] || { echo "docs_screenshots.sh: $html/$page not built" >&2; exit 1; }
  name=$(echo "${page%.html}" | tr '/' '_')
  for size in desktop:1280,1600 narrow:400,1600; do
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size#*:}" \
      --screenshot="$out/${name}_${size%%:*}.png" "file://$html/$page" >/dev/null 2>&1
    echo "$out/${name}_${size%%:*}.png"
  done
done
