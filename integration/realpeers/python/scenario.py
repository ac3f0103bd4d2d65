"""Drives the E2B Python SDK (sync API) through corectl and the sandgate
gateway, the Python twin of integration/js/sdk.mjs's "peers" scenario, and
prints one JSON object with what happened.

    python3 scenario.py peers
    python3 scenario.py domain
    python3 scenario.py bound
    python3 scenario.py user_env
    python3 scenario.py list
    python3 scenario.py pty
    python3 scenario.py stdin
    python3 scenario.py watch

Environment: E2B_API_URL (corectl), E2B_SANDBOX_URL (the gateway),
E2B_API_KEY, SCENARIO_DIR (a sandbox directory the scenario may use).
The "domain" scenario, the twin of sdk.mjs's: E2B_DOMAIN and E2B_API_KEY
only, NETWORK (the create's network options, JSON), PORT (the sandbox
port of an HTTP and WebSocket server), TEST_DOMAIN and TEST_DOMAIN_IP
(every name under TEST_DOMAIN resolves to TEST_DOMAIN_IP in this process,
as a wildcard DNS record would) and SSL_CERT_FILE (the CA httpx trusts).
The "bound" scenario: HELD (the gateway's max_requests_per_credential)
and SCENARIO_DIR. The "user_env" scenario, the twin of sdk.mjs's
"userEnv": SANDBOX_ID (a sandbox to connect to). The "list" scenario:
SANDBOX_ID and SCENARIO_DIR (the directory it lists). The "pty" and "stdin"
scenarios: SANDBOX_ID; "watch": SANDBOX_ID and SCENARIO_DIR. PYTHONPATH must hold the SDK's source (e2b,
e2b_connect) and this directory.
"""

import base64
import json
import os
import socket
import ssl
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


def bound():
    """max_requests_per_credential: HELD background commands hold their
    streams at the gateway; one more command and is_running() are refused
    while they do; once the handles disconnect and the commands end,
    commands run again (polled: the gateway sees the streams go a moment
    after the SDK drops them)."""
    d = os.environ.get("SCENARIO_DIR", "/home/user/scenario")
    stop = d + "/stop"
    sbx = Sandbox.create("base", timeout=300)
    sbx.commands.run("mkdir -p %s" % d)
    wait = "while [ ! -f %s ]; do sleep 0.05; done" % stop
    handles = [sbx.commands.run(wait, background=True) for _ in range(int(os.environ["HELD"]))]
    out = {"held": len(handles)}
    out["over"] = attempt(lambda: sbx.commands.run(wait, background=True) and None)
    out["running"] = attempt(lambda: sbx.is_running())
    for h in handles:
        h.disconnect()
    after = None
    for _ in range(200):
        after = attempt(lambda: sbx.commands.run("touch %s; echo after" % stop).stdout)
        if after["ok"]:
            break
        time.sleep(0.05)
    out["after"] = after
    out["kill"] = attempt(lambda: sbx.kill())
    return out


def user_env():
    sbx = Sandbox.connect(os.environ["SANDBOX_ID"])
    sbx.commands.run("chown 1000:1000 /home/user", user="root")
    show = 'printf \'%s|\' "$(id -u)" "$HOME" "$USER" "$LOGNAME"'

    def result(r):
        return {"stdout": r.stdout, "stderr": r.stderr}

    def run(cmd, **kw):
        return result(sbx.commands.run(cmd, user="user", **kw))

    return {
        "env": attempt(lambda: run(show)),
        "background": attempt(lambda: result(sbx.commands.run(show, user="user", background=True).wait())),
        "asked": attempt(lambda: run(show, envs={"HOME": "/tmp", "USER": "me"})),
        "home": attempt(lambda: run("touch ~/at-home && ls ~")),
        "gitGlobal": attempt(lambda: run("git config --global user.name 'Sandbox User' && git config --global user.name")),
    }


def stdin():
    """A writable stdin, as the mapped user "user": a command started in
    the background with stdin=True reads what send_stdin wrote (two calls,
    in order: "%", a backslash, a non-ASCII letter) until head -c has its
    8 bytes; wait() has its output and exit code; a send_stdin after its
    end fails. The Python SDK 2.24 has no close_stdin."""
    sbx = Sandbox.connect(os.environ["SANDBOX_ID"])
    h = sbx.commands.run("head -c 8; echo; id -u", user="user", background=True, stdin=True)
    out = {"send": attempt(lambda: sbx.commands.send_stdin(h.pid, "ab%s\\") and None)}
    out["send2"] = attempt(lambda: sbx.commands.send_stdin(h.pid, "\u00fc\n") and None)

    def result():
        r = h.wait()
        return {"exitCode": r.exit_code, "stdout": r.stdout, "stderr": r.stderr}

    out["wait"] = attempt(result)
    out["afterEnd"] = attempt(lambda: sbx.commands.send_stdin(h.pid, "x") and None)
    return out


def watch():
    """The synchronous watch_dir (envd's watchers: CreateWatcher,
    GetWatcherEvents, RemoveWatcher): the events since the last call, by
    name, for a file created, written and removed, and a directory made;
    none when nothing changed; stop() twice (the second: the watcher is
    gone)."""
    sbx = Sandbox.connect(os.environ["SANDBOX_ID"])
    d = os.environ.get("SCENARIO_DIR", "/home/user/watch")
    sbx.files.make_dir(d)
    h = sbx.files.watch_dir(d)

    def events():
        return ["%s:%s" % (e.type.value, e.name) for e in h.get_new_events()]

    out = {"none": attempt(events)}
    sbx.files.write(d + "/w.txt", "one")
    sbx.files.make_dir(d + "/sub")
    out["created"] = attempt(events)
    sbx.files.write(d + "/w.txt", "one two")
    out["written"] = attempt(events)
    sbx.files.remove(d + "/w.txt")
    out["removed"] = attempt(events)
    out["stop"] = attempt(lambda: h.stop() and None)
    out["stopAgain"] = attempt(lambda: h.stop() and None)
    return out


def pty():
    """The twin of sdk.mjs's "pty": a terminal through the SDK's pty API
    (extended_operations), its output read by a thread in wait(on_pty=)."""
    import re
    import threading

    from e2b.sandbox.commands.command_handle import PtySize

    sbx = Sandbox.connect(os.environ["SANDBOX_ID"])
    chunks = []
    lock = threading.Lock()

    def text():
        with lock:
            return b"".join(chunks).decode("utf-8", "replace")

    def on_pty(b):
        with lock:
            chunks.append(bytes(b))

    h = sbx.pty.create(PtySize(rows=24, cols=80))
    waited = {}

    def follow():
        waited["wait"] = attempt(lambda: h.wait(on_pty=on_pty).exit_code)

    th = threading.Thread(target=follow)
    th.start()

    def wait_for(pattern):
        deadline = time.time() + 10
        while time.time() < deadline:
            m = re.search(pattern, text())
            if m:
                return m.group(1) if m.groups() else True
            time.sleep(0.02)
        raise TimeoutError("no %r in %r" % (pattern, text()))

    def typed(line, pattern):
        sbx.pty.send_stdin(h.pid, line.encode())
        return wait_for(pattern)

    out = {"pid": h.pid}
    out["hi"] = attempt(lambda: typed("echo hi\n", r"[\r\n]hi\r\n"))
    out["sizeBefore"] = attempt(lambda: typed("stty size\n", r"[\r\n](\d+ \d+)\r\n"))
    out["resize"] = attempt(lambda: sbx.pty.resize(h.pid, PtySize(rows=30, cols=100)))
    out["sizeAfter"] = attempt(lambda: typed("stty size\n", r"[\r\n](30 100)\r\n"))
    out["kill"] = attempt(lambda: sbx.pty.kill(h.pid))
    th.join(30)
    out["wait"] = waited.get("wait", {"ok": False, "error": {"name": "Timeout", "message": "wait() did not return"}})
    out["killAgain"] = attempt(lambda: sbx.pty.kill(h.pid))
    out["output"] = text()
    return out


def list_dir():
    """files.list of SCENARIO_DIR in sandbox SANDBOX_ID at depth 1: each
    entry's name, type and symlink target."""
    sbx = Sandbox.connect(os.environ["SANDBOX_ID"])
    d = os.environ["SCENARIO_DIR"]
    return attempt(lambda: [{"name": e.name, "type": e.type.value, "symlinkTarget": e.symlink_target}
                            for e in sbx.files.list(d)])


def resolve_test_domain():
    """Resolves every name under TEST_DOMAIN to TEST_DOMAIN_IP for this
    process (socket.getaddrinfo, which httpx dials through)."""
    domain = os.environ.get("TEST_DOMAIN", "").lower()
    ip = os.environ.get("TEST_DOMAIN_IP", "127.0.0.1")
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        h = host.decode() if isinstance(host, bytes) else str(host)
        h = h.lower().rstrip(".")
        if domain and (h == domain or h.endswith("." + domain)):
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, int(port or 0)))]
        return real(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def ws_round_trip(host, path, headers, message):
    """One WebSocket text message to wss://host/path and the answer
    (RFC 6455 by hand: Debian's Python has no WebSocket client)."""
    ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    with socket.create_connection((host, 443), timeout=30) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join("%s: %s\r\n" % kv for kv in headers.items())
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n" % (path, host, key, extra)).encode())
        f = s.makefile("rb")
        status = f.readline().decode()
        if " 101 " not in status:
            raise RuntimeError("handshake answered %r" % status.strip())
        while f.readline() not in (b"\r\n", b""):
            pass
        payload, mask = message.encode(), os.urandom(4)
        s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        head = f.read(2)
        n = head[1] & 0x7F
        if n == 126:
            n = int.from_bytes(f.read(2), "big")
        return f.read(n).decode()


def domain():
    import httpx

    resolve_test_domain()
    d = os.environ.get("SCENARIO_DIR", "/home/user/scenario")
    network = json.loads(os.environ["NETWORK"]) if os.environ.get("NETWORK") else None
    sbx = Sandbox.create("base", timeout=300, network=network)
    out = {"sandboxId": sbx.sandbox_id}
    r = sbx.commands.run("echo created")
    out["run"] = {"exitCode": r.exit_code, "stdout": r.stdout}
    sbx.files.write(d + "/hello.txt", "hello domain\n")
    again = Sandbox.connect(sbx.sandbox_id)
    out["connectedId"] = again.sandbox_id
    out["read"] = again.files.read(d + "/hello.txt")
    host = sbx.get_host(int(os.environ["PORT"]))
    out["host"] = host
    token = sbx.traffic_access_token
    out["hasTrafficToken"] = isinstance(token, str) and token != ""
    headers = {"e2b-traffic-access-token": token} if out["hasTrafficToken"] else {}
    with httpx.Client(timeout=30) as c:
        plain = c.get("https://%s/hello?q=1" % host)
        out["fetchWithout"] = {"status": plain.status_code, "code": plain.headers.get("sandgate-error-code")}
        res = c.post("https://%s/hello?q=1" % host, headers=headers, content=b"payload")
        out["fetch"] = {"status": res.status_code, "body": res.text}
    out["ws"] = attempt(lambda: ws_round_trip(host, "/ws", headers, "ping"))
    out["kill"] = attempt(lambda: sbx.kill())
    return out


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    scenarios = {"peers": peers, "domain": domain, "bound": bound, "user_env": user_env, "list": list_dir, "pty": pty,
                 "stdin": stdin, "watch": watch}
    if name not in scenarios:
        print("unknown scenario %r; one of: %s" % (name, ", ".join(scenarios)), file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"package": "e2b-python-" + e2b.__dict__.get("__version__", bridges.E2B_VERSION), "scenario": name,
                      "result": scenarios[name]()}))
