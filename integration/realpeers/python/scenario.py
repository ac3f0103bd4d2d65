"""Drives the E2B Python SDK (sync API) through corectl and the sandgate
gateway, the Python twin of integration/js/sdk.mjs's "peers" scenario, and
prints one JSON object with what happened.

    python3 scenario.py peers

Environment: E2B_API_URL (corectl), E2B_SANDBOX_URL (the gateway),
E2B_API_KEY, SCENARIO_DIR (a sandbox directory the scenario may use).
PYTHONPATH must hold the SDK's source (e2b, e2b_connect) and this
directory.
"""

import json
import os
import sys
import time

import bridges  # noqa: F401  (before e2b)

import e2b  # noqa: E402
from e2b import Sandbox  # noqa: E402


def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as err:  # noqa: BLE001
        return {"ok": False, "error": {"name": type(err).__name__, "message": str(err)}}


def peers():
    d = os.environ.get("SCENARIO_DIR", "/home/user/scenario")
    sbx = Sandbox.create("base", timeout=300)
    out = {"sandboxId": sbx.sandbox_id}
    r = sbx.commands.run("echo created")
    out["run"] = {"exitCode": r.exit_code, "stdout": r.stdout}
    out["write"] = {"path": sbx.files.write(d + "/hello.txt", "hello peers\n").path}
    out["read"] = sbx.files.read(d + "/hello.txt")
    out["filesList"] = sorted(e.name for e in sbx.files.list(d))
    out["sandboxList"] = sorted(s.sandbox_id for s in Sandbox.list().next_items())
    t0 = time.time()
    sbx.set_timeout(120)
    out["endAfterSetTimeoutMs"] = int((sbx.get_info().end_at.timestamp() - t0) * 1000)
    again = Sandbox.connect(sbx.sandbox_id)
    out["connectedId"] = again.sandbox_id
    r = again.commands.run("echo connected")
    out["runAgain"] = {"exitCode": r.exit_code, "stdout": r.stdout}
    out["kill"] = attempt(lambda: sbx.kill())
    out["killAgain"] = attempt(lambda: Sandbox.kill(sbx.sandbox_id))
    out["connectAfterKill"] = attempt(lambda: Sandbox.connect(sbx.sandbox_id).sandbox_id)
    return out


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name != "peers":
        print("unknown scenario %r; one of: peers" % name, file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"package": "e2b-python-" + e2b.__dict__.get("__version__", bridges.E2B_VERSION), "scenario": name,
                      "result": peers()}))
