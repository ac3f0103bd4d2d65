// Drives the official E2B JS SDK against a sandgate gateway and prints one JSON
// object with what happened, for the Go integration tests and the demo.
//
//   node sdk.mjs <scenario>
//
// Environment:
//   E2B_PACKAGE       the SDK package to load, e.g. e2b-2.51.0 (an npm alias in package.json)
//   E2B_API_URL       the control-API stub that hands out tokens
//   E2B_SANDBOX_URL   the gateway, http://127.0.0.1:<port>
//   SANDBOX_ID        the sandbox to connect to
//   SCENARIO_DIR      a directory (sandbox path) the scenario may use
//   GO_FILE           a host path the "stream" scenario creates to let its command continue;
//                     the "heldCommands" scenario: GO_FILE.<n> lets its step n go on
//   HELD              the "heldCommands" scenario: the background commands it holds
//   READY_FILE        the "drain" scenario: a host path it creates once both commands stream;
//                     the "ptyReload" scenario: once its terminal answered (GO_FILE: after the reload);
//                     the "apiKeyTraffic" scenario: once its first round is done;
//                     the "heldCommands" scenario: READY_FILE.<n> as its step n is reached
//   STOP_FILE         the "drain" scenario: the host path that ends its long command;
//                     the "apiKeyTraffic" scenario: the host path that ends its rounds;
//                     the "heldCommands" scenario: the host path that ends its commands
//   E2B_API_KEY       the API key sent to E2B_API_URL (default e2b_sandgate_test)
//   NETWORK           the "lifecycle" scenario's create-time network object (JSON)
//   OTHER_API_KEY     the "authz" scenario: another credential's API key (same namespace)
//   FOREIGN_API_URL   the "authz" scenario: a control-API stub that hands out tokens of another credential
//   GZIP_BYTES        the size of the "gzipWrite" scenario's large write (zeros)
//   METADATA          the "controlapi" scenario's create metadata (JSON object of strings)
//   E2B_DOMAIN        the "domain" scenario: the only address the SDK is given (with E2B_API_KEY)
//   PORT              the "domain" scenario: the sandbox port of the user's HTTP and WebSocket server
//   PHASE, PID, TIMEOUT_MS, KILL  the "ptyOrphan" scenario's phase (create or check), the terminal's pid
//                     (check), its timeout (create), and whether check kills it
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, writeFileSync } from 'node:fs'

const pkg = process.env.E2B_PACKAGE || 'e2b-2.51.0'
const e2b = await import(pkg)
const { Sandbox } = e2b

function describe(err) {
  if (!err) return null
  return { name: err.constructor?.name ?? 'Error', message: String(err.message ?? err), exitCode: err.exitCode }
}

// terminal creates an 80x24 terminal (sbx.pty.create) whose output it
// collects: input types into it, waitFor(re) resolves with re's match in
// the output so far, or fails after 10 s.
async function terminal(sbx) {
  const chunks = []
  const dec = new TextDecoder()
  const enc = new TextEncoder()
  const text = () => chunks.join('')
  // A command's output follows the echo of its line and, where bash
  // turns bracketed paste off, "\r": it starts after "\r" or "\n".
  const waitFor = (re) =>
    new Promise((resolve, reject) => {
      let done = false
      const t = setTimeout(() => {
        done = true
        reject(new Error(`no ${re} in ${JSON.stringify(text())}`))
      }, 10000)
      const check = () => {
        if (done) return
        const m = text().match(re)
        if (m) {
          done = true
          clearTimeout(t)
          resolve(m)
        } else setTimeout(check, 20)
      }
      check()
    })
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => chunks.push(dec.decode(d, { stream: true })) })
  const input = (s) => sbx.pty.sendInput(h.pid, enc.encode(s))
  return { h, input, waitFor, text }
}

async function attempt(fn) {
  try {
    return { ok: true, value: await fn() }
  } catch (err) {
    return { ok: false, error: describe(err), stdout: err?.stdout, stderr: err?.stderr }
  }
}

const sha = (buf) => createHash('sha256').update(buf).digest('hex')

async function connect() {
  return Sandbox.connect(process.env.SANDBOX_ID, {
    apiKey: 'e2b_sandgate_test',
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  })
}

const dir = process.env.SCENARIO_DIR || '/home/user/scenario'

const scenarios = {
  // The README demo: a short session that shows each operation.
  async demo(sbx) {
    const out = {}
    out.run = await sbx.commands.run('echo "hello from $(uname -s)"; echo to-stderr >&2')
    out.write = await sbx.files.write(`${dir}/hello.txt`, 'hello world\n')
    out.read = await sbx.files.read(`${dir}/hello.txt`)
    out.list = (await sbx.files.list(dir)).map((e) => ({ name: e.name, type: e.type, size: e.size }))
    await sbx.files.remove(`${dir}/hello.txt`)
    out.listAfterRemove = (await sbx.files.list(dir)).map((e) => e.name)
    return out
  },

  async run(sbx) {
    return {
      ok: await attempt(() => sbx.commands.run('echo hi')),
      fail: await attempt(() => sbx.commands.run('echo out; echo err >&2; exit 3')),
      exact: await attempt(() => sbx.commands.run(`printf 'a\\n\\nb'; printf 'x\\ny\\n' >&2`)),
      envCwd: await attempt(() => sbx.commands.run('pwd; echo "$GREETING"', { cwd: dir, envs: { GREETING: "it's quoted" } })),
      args: await attempt(() => sbx.commands.run(`printf '%s|' "one two" 'three'`)),
    }
  },

  // Output must reach the SDK while the command runs: the command prints
  // "first" and then waits until this script has seen it (it creates GO_FILE).
  async stream(sbx) {
    const seen = []
    const go = process.env.GO_FILE
    const result = await attempt(() =>
      sbx.commands.run(`echo first; while [ ! -f '${go}' ]; do sleep 0.05; done; for i in 1 2 3; do echo tick$i; sleep 1; done`, {
        timeoutMs: 30000,
        onStdout: (data) => {
          seen.push(data)
          if (seen.join('').includes('first')) writeFileSync(go, 'go')
        },
      }),
    )
    return { result, chunks: seen }
  },

  // Two commands across a gateway shutdown (TestDrainEndsLongStreams):
  // "short" ends once GO_FILE exists, which the test creates after the
  // drain began; "long" runs until STOP_FILE exists, past the drain's
  // grace, which ends its stream. READY_FILE tells the test both stream.
  async drain(sbx) {
    const seen = { short: '', long: '' }
    const saw = (k) => (d) => {
      seen[k] += d
      if (seen.short.includes('first') && seen.long.includes('first')) writeFileSync(process.env.READY_FILE, 'ready')
    }
    const until = (f, rest) => `echo first; while [ ! -f '${f}' ]; do sleep 0.05; done${rest}`
    const [short, long] = await Promise.all([
      attempt(() => sbx.commands.run(until(process.env.GO_FILE, '; echo finished'), { timeoutMs: 0, onStdout: saw('short') })),
      attempt(() => sbx.commands.run(until(process.env.STOP_FILE, ''), { timeoutMs: 0, onStdout: saw('long') })),
    ])
    return { short, long, seen }
  },

  // max_requests_per_credential (TestRequestsPerCredentialBounded): HELD
  // background commands, each holding its stream at the gateway, then one
  // more, which the gateway refuses, isRunning(), files.read, files.write
  // and files.list. Then, in steps the Go test paces
  // (this script creates READY_FILE.<n> and waits for GO_FILE.<n>): one
  // handle disconnects; one more command starts; STOP_FILE ends them all.
  async heldCommands(sbx) {
    const step = async (n) => {
      writeFileSync(`${process.env.READY_FILE}.${n}`, '')
      while (!existsSync(`${process.env.GO_FILE}.${n}`)) await new Promise((r) => setTimeout(r, 20))
    }
    const cmd = `while [ ! -f '${process.env.STOP_FILE}' ]; do sleep 0.05; done`
    const start = () => sbx.commands.run(cmd, { background: true, timeoutMs: 0 })
    const handles = []
    for (let i = 0; i < Number(process.env.HELD); i++) handles.push(await start())
    const over = await attempt(start)
    const running = await attempt(() => sbx.isRunning())
    // The REST routes and a unary call at the bound.
    const read = await attempt(() => sbx.files.read('/home/user/held.txt'))
    const write = await attempt(() => sbx.files.write('/home/user/held.txt', 'x'))
    const list = await attempt(() => sbx.files.list('/home/user'))
    await step(1)
    await handles.shift().disconnect()
    await step(2)
    const after = await attempt(start)
    if (after.ok) handles.push(after.value)
    writeFileSync(process.env.STOP_FILE, '')
    const ends = []
    for (const h of handles) ends.push((await attempt(() => h.wait())).ok)
    return {
      held: Number(process.env.HELD),
      over: { ok: over.ok, error: over.error },
      running,
      read: { ok: read.ok, error: read.error },
      write: { ok: write.ok, error: write.error },
      list: { ok: list.ok, error: list.error },
      after: { ok: after.ok, error: after.error },
      ends,
    }
  },

  // Start a background command, disconnect from it, and exit; the Go test
  // checks that the command keeps running in execd until GO_FILE appears.
  async disconnect(sbx) {
    let started
    const startedP = new Promise((r) => (started = r))
    const go = process.env.GO_FILE
    const handle = await sbx.commands.run(`echo started; while [ ! -f '${go}' ]; do sleep 0.05; done; echo finished`, {
      background: true,
      onStdout: (d) => { if (d.includes('started')) started() },
    })
    await startedP
    await handle.disconnect()
    return { pid: handle.pid }
  },

  async files(sbx) {
    const out = {}
    const big = randomBytes(5 * 1024 * 1024)
    out.bigWrite = await attempt(() => sbx.files.write(`${dir}/big.bin`, big.buffer.slice(big.byteOffset, big.byteOffset + big.length)))
    const back = await attempt(async () => Buffer.from(await sbx.files.read(`${dir}/big.bin`, { format: 'bytes' })))
    out.bigRoundTrip = back.ok ? { sameSha: sha(back.value) === sha(big), size: back.value.length } : back
    out.bigSha = sha(big) // lets the Go test compare what landed on disk
    out.unicodeWrite = await attempt(() => sbx.files.write(`${dir}/ünï cødé/文件 1.txt`, 'unicode ✓'))
    out.unicodeRead = await attempt(() => sbx.files.read(`${dir}/ünï cødé/文件 1.txt`))
    out.multiWrite = await attempt(() =>
      sbx.files.write([
        { path: `${dir}/multi/a.txt`, data: 'A' },
        { path: `${dir}/multi/sub/b.txt`, data: 'BB' },
      ]),
    )
    const names = (l) => l.map((e) => `${e.type}:${e.path.slice(dir.length)}:${e.type === 'file' ? e.size : ''}`).sort()
    out.list1 = await attempt(async () => names(await sbx.files.list(`${dir}/multi`)))
    out.list2 = await attempt(async () => names(await sbx.files.list(`${dir}/multi`, { depth: 2 })))
    out.entry = await attempt(async () => {
      const [e] = (await sbx.files.list(`${dir}/multi`)).filter((x) => x.name === 'a.txt')
      return { mode: e.mode, permissions: e.permissions, modifiedIsDate: e.modifiedTime instanceof Date, size: e.size }
    })
    out.readDir = await attempt(() => sbx.files.read(`${dir}/multi`))
    out.readMissing = await attempt(() => sbx.files.read(`${dir}/nope.txt`))
    out.listMissing = await attempt(() => sbx.files.list(`${dir}/nope`))
    out.removeFile = await attempt(() => sbx.files.remove(`${dir}/multi/a.txt`))
    out.removeDir = await attempt(() => sbx.files.remove(`${dir}/multi`))
    out.listAfterRemove = await attempt(async () => names(await sbx.files.list(dir)))
    out.removeMissing = await attempt(() => sbx.files.remove(`${dir}/never-existed`))
    return out
  },

  // files.write with gzip (an octet-stream body; JS 2.25 compresses only
  // with useOctetStream): a small random file (read back), then GZIP_BYTES
  // of zeros through the SDK's CompressionStream.
  async gzipWrite(sbx) {
    const out = {}
    const small = randomBytes(256 * 1024)
    out.small = await attempt(() => sbx.files.write(`${dir}/small.bin`, small.buffer.slice(small.byteOffset, small.byteOffset + small.length), { gzip: true, useOctetStream: true }))
    const back = await attempt(async () => Buffer.from(await sbx.files.read(`${dir}/small.bin`, { format: 'bytes' })))
    out.smallSameSha = back.ok && sha(back.value) === sha(small)
    let left = Number(process.env.GZIP_BYTES)
    const zeros = new ReadableStream({
      pull(controller) {
        if (left <= 0) return controller.close()
        const n = Math.min(left, 1 << 20)
        left -= n
        controller.enqueue(new Uint8Array(n))
      },
    })
    out.large = await attempt(() => sbx.files.write(`${dir}/large.bin`, zeros, { gzip: true, useOctetStream: true }))
    return out
  },

  async unsupported(sbx) {
    return {
      makeDir: await attempt(() => sbx.files.makeDir(`${dir}/newdir`)),
      rename: await attempt(() => sbx.files.rename(`${dir}/a`, `${dir}/b`)),
      listProcesses: await attempt(() => sbx.commands.list()),
    }
  },

  // The extended operations (extended_operations): a background server that
  // outlives its stream, listed, connected to from where its output is,
  // refused stdin (started without), killed; a command given a stdin; a
  // directory watch; then exists/getInfo/makeDir/rename.
  async extended(sbx) {
    const out = {}
    const go = process.env.GO_FILE
    const waitFor = (chunks, word) =>
      new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no "${word}" in ${JSON.stringify(chunks)}`)), 30000)
        const check = () => (chunks.join('').includes(word) ? (clearTimeout(t), resolve()) : setTimeout(check, 20))
        check()
      })
    const first = []
    const h = await sbx.commands.run(`echo before; while [ ! -f '${go}' ]; do sleep 0.05; done; echo after; while true; do sleep 1; done`, {
      background: true, cwd: dir, envs: { MODE: 'server' }, onStdout: (d) => first.push(d),
    })
    await waitFor(first, 'before')
    await h.disconnect()
    out.pid = h.pid
    out.list = await attempt(async () => (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args, envs: p.envs, cwd: p.cwd })))
    const seen = []
    const conn = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
    writeFileSync(go, 'go')
    await waitFor(seen, 'after')
    out.connected = seen
    out.sendStdin = await attempt(() => sbx.commands.sendStdin(h.pid, 'x'))
    out.kill = await attempt(() => sbx.commands.kill(h.pid))
    out.waitAfterKill = await attempt(() => conn.wait())
    out.killAgain = await attempt(() => sbx.commands.kill(h.pid))
    out.listAfter = await attempt(async () => (await sbx.commands.list()).map((p) => p.pid))
    out.connectGone = await attempt(() => sbx.commands.connect(123456))

    // A writable stdin (stdin: true): cat prints what sendStdin wrote, in
    // order; closeStdin gives it end of file, so it ends with 0; its stdin
    // is gone with it, and the List after it removes its files.
    const stdinSeen = []
    const inH = await sbx.commands.run('cat; echo; echo cat-ended-$?', { background: true, stdin: true, cwd: dir, onStdout: (d) => stdinSeen.push(d) })
    out.stdinSend = await attempt(() => sbx.commands.sendStdin(inH.pid, `%s %% \\ ' " $HOME \u00fc\u20ac\n`))
    out.stdinSend2 = await attempt(() => sbx.commands.sendStdin(inH.pid, 'second\n'))
    await waitFor(stdinSeen, 'second\n')
    out.stdinClose = await attempt(() => sbx.commands.closeStdin(inH.pid))
    out.stdinWait = await attempt(async () => { const r = await inH.wait(); return { exitCode: r.exitCode, stdout: r.stdout } })
    out.stdinAfterEnd = await attempt(() => sbx.commands.sendStdin(inH.pid, 'x'))
    out.stdinSeen = stdinSeen.join('')
    out.stdinListAfter = await attempt(async () => (await sbx.commands.list()).map((p) => p.pid))

    // A directory watch (watchDir: execd's listing polled): a file
    // created, written, then removed, each reported by name; stop() ends
    // it.
    const watchSeen = []
    const wdir = `${dir}/watched`
    await sbx.files.makeDir(wdir)
    const watch = await sbx.files.watchDir(wdir, (ev) => watchSeen.push(`${ev.type}:${ev.name};`), { timeoutMs: 0 })
    await sbx.files.write(`${wdir}/w.txt`, 'one')
    await waitFor(watchSeen, 'create:w.txt;')
    await sbx.files.write(`${wdir}/w.txt`, 'one two')
    await waitFor(watchSeen, 'write:w.txt;')
    await sbx.files.remove(`${wdir}/w.txt`)
    await waitFor(watchSeen, 'remove:w.txt;')
    out.watchStop = await attempt(() => watch.stop())
    out.watchSeen = watchSeen

    await sbx.files.write(`${dir}/f.txt`, 'hello!')
    out.exists = await attempt(() => sbx.files.exists(`${dir}/f.txt`))
    out.existsMissing = await attempt(() => sbx.files.exists(`${dir}/nope`))
    const info = (i) => ({ name: i.name, type: i.type, path: i.path, size: i.size, mode: i.mode, permissions: i.permissions, modifiedIsDate: i.modifiedTime instanceof Date })
    out.getInfo = await attempt(async () => info(await sbx.files.getInfo(`${dir}/f.txt`)))
    out.getInfoDir = await attempt(async () => info(await sbx.files.getInfo(dir)))
    out.getInfoMissing = await attempt(() => sbx.files.getInfo(`${dir}/nope`))
    out.makeDir = await attempt(() => sbx.files.makeDir(`${dir}/new/deep`))
    out.makeDirAgain = await attempt(() => sbx.files.makeDir(`${dir}/new/deep`))
    out.rename = await attempt(async () => info(await sbx.files.rename(`${dir}/f.txt`, `${dir}/new/g.txt`)))
    out.renameMissing = await attempt(() => sbx.files.rename(`${dir}/f.txt`, `${dir}/new/h.txt`))
    out.existsAfterRename = await attempt(() => sbx.files.exists(`${dir}/f.txt`))
    return out
  },

  // A terminal (extended_operations): pty.create as a web terminal makes
  // it, input (echo hi), a pty.connect beside it that sees what follows, a resize that stty size then shows, the shell's
  // uid, pty.kill (true, then false), and wait() after the kill.
  async pty(sbx) {
    const out = {}
    const { h, input, waitFor, text } = await terminal(sbx)
    out.pid = h.pid
    out.list = await attempt(async () => (await sbx.commands.list()).filter((p) => p.pid === h.pid).map((p) => ({ cmd: p.cmd, args: p.args })))
    out.hi = await attempt(async () => (await input('echo hi\n'), await waitFor(/[\r\n]hi\r\n/)) !== null)
    // A second stream following the terminal: pty.connect while the
    // create's handle still streams it; both get what the shell writes
    // from then on, and the follower's disconnect leaves the terminal be.
    out.follow = await attempt(async () => {
      const seen = []
      const dec = new TextDecoder()
      const f = await sbx.pty.connect(h.pid, { onData: (d) => seen.push(dec.decode(d, { stream: true })) })
      await input('echo both\n')
      await waitFor(/[\r\n]both\r\n/)
      for (let i = 0; i < 500 && !/[\r\n]both\r\n/.test(seen.join('')); i++) await new Promise((r) => setTimeout(r, 20))
      await f.disconnect()
      return /[\r\n]both\r\n/.test(seen.join(''))
    })
    out.sizeBefore = await attempt(async () => (await input('stty size\n'), await waitFor(/[\r\n](\d+ \d+)\r\n/))[1])
    out.resize = await attempt(() => sbx.pty.resize(h.pid, { cols: 100, rows: 30 }))
    out.sizeAfter = await attempt(async () => (await input('stty size\n'), await waitFor(/[\r\n](30 100)\r\n/))[1])
    out.uid = await attempt(async () => (await input('echo "u=$(id -u)"\n'), await waitFor(/[\r\n]u=(\d+)\r\n/))[1])
    out.output = text()
    out.kill = await attempt(() => sbx.pty.kill(h.pid))
    out.wait = await attempt(async () => {
      const r = await h.wait()
      return { exitCode: r.exitCode }
    })
    out.killAgain = await attempt(() => sbx.pty.kill(h.pid))
    return out
  },

  // A terminal across a `caddy reload` (extended_operations,
  // TestPTYAcrossAReloadAgainstTheRealExecd): pty.create and input, then
  // READY_FILE for the test, which reloads the gateway and creates
  // GO_FILE; then input and a resize, which go on new connections to the
  // new configuration while the terminal's stream stays with the replaced
  // one, and pty.kill.
  async ptyReload(sbx) {
    const out = {}
    const { h, input, waitFor, text } = await terminal(sbx)
    out.before = await attempt(async () => (await input('echo before\n'), await waitFor(/[\r\n]before\r\n/)) !== null)
    writeFileSync(process.env.READY_FILE, '')
    while (!existsSync(process.env.GO_FILE)) await new Promise((r) => setTimeout(r, 20))
    out.after = await attempt(async () => (await input('echo after\n'), await waitFor(/[\r\n]after\r\n/)) !== null)
    out.resize = await attempt(() => sbx.pty.resize(h.pid, { cols: 100, rows: 30 }))
    out.sizeAfter = await attempt(async () => (await input('stty size\n'), await waitFor(/[\r\n](30 100)\r\n/))[1])
    out.output = text()
    out.kill = await attempt(() => sbx.pty.kill(h.pid))
    out.wait = await attempt(async () => {
      const r = await h.wait()
      return { exitCode: r.exitCode }
    })
    return out
  },

  // A terminal whose gateway stops before its deadline
  // (TestPTYOrphanAgainstTheRealExecd). PHASE=create: pty.create with
  // timeoutMs TIMEOUT_MS, then disconnect (the terminal keeps running);
  // prints its pid. PHASE=check: whether commands.list() lists PID, and,
  // with KILL=1, pty.kill(PID).
  async ptyOrphan(sbx) {
    if (process.env.PHASE === 'create') {
      const h = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: Number(process.env.TIMEOUT_MS), onData: () => {} })
      await h.disconnect()
      return { pid: h.pid }
    }
    const pid = Number(process.env.PID)
    const out = { listed: await attempt(async () => (await sbx.commands.list()).some((p) => p.pid === pid)) }
    if (process.env.KILL === '1') out.kill = await attempt(() => sbx.pty.kill(pid))
    return out
  },

  // Two streams on one process (extended_operations): the Start stream of
  // a background command kept, and a Connect stream beside it; each must
  // get the output, whichever sees the end first. Three rounds.
  async twoStreams(sbx) {
    const rounds = []
    for (let i = 0; i < 3; i++) {
      const h = await sbx.commands.run(`sleep 0.7; echo X${i}`, { background: true, timeoutMs: 0 })
      const h2 = await sbx.commands.connect(h.pid, { timeoutMs: 0 })
      const [a, b] = await Promise.all([attempt(async () => (await h.wait()).stdout), attempt(async () => (await h2.wait()).stdout)])
      rounds.push({ start: a, connect: b })
    }
    return { rounds }
  },

  // Commands as the SDK user "user", which the gateway maps to uid 1000
  // with home /home/user (as Caddyfile.example does): what envd gives a
  // user's process (HOME, USER, LOGNAME), the request's envs over it, and
  // what needs HOME: a file in ~ and git's global configuration. First,
  // as root, /home/user is given to uid 1000.
  async userEnv(sbx) {
    await sbx.commands.run('chown 1000:1000 /home/user', { user: 'root' })
    const show = `printf '%s|' "$(id -u)" "$HOME" "$USER" "$LOGNAME"`
    const result = (r) => ({ stdout: r.stdout, stderr: r.stderr })
    const run = async (cmd, opts) => result(await sbx.commands.run(cmd, { user: 'user', ...opts }))
    return {
      env: await attempt(() => run(show)),
      background: await attempt(async () => result(await (await sbx.commands.run(show, { user: 'user', background: true })).wait())),
      asked: await attempt(() => run(show, { envs: { HOME: '/tmp', USER: 'me' } })),
      home: await attempt(() => run('touch ~/at-home && ls ~')),
      gitGlobal: await attempt(() => run("git config --global user.name 'Sandbox User' && git config --global user.name")),
    }
  },

  // files.list at depth 1 and 2, every field the SDK gives.
  async list(sbx) {
    const show = (l) => l.map((e) => ({ ...e, modifiedTime: e.modifiedTime?.toISOString() }))
    return {
      depth1: await attempt(async () => show(await sbx.files.list(dir))),
      depth2: await attempt(async () => show(await sbx.files.list(dir, { depth: 2 }))),
    }
  },

  // sbx.isRunning(): envd's GET /health.
  async isRunning(sbx) {
    return { running: await attempt(() => sbx.isRunning()) }
  },

  // One call of each shape, for the error scenarios (bad token, disabled
  // credential, wrong sandbox, unknown cluster).
  async denied(sbx) {
    return {
      run: await attempt(() => sbx.commands.run('echo should-not-run')),
      list: await attempt(() => sbx.files.list(dir)),
      read: await attempt(() => sbx.files.read(`${dir}/x.txt`)),
    }
  },
}

// The error-code matrix: for each row of PLAN (JSON: [{name, id, sandboxUrl,
// routes, args}]) connect to sandbox id (through sandboxUrl if given) and
// make one SDK call per route, every row and route at once. args: P and P2
// (paths), PID, CMD, CWD, USER_NAME (user= of the calls that take one),
// TIMEOUT_MS, START_BG (a command started in the background first; PID then
// defaults to its pid).
async function matrixRow(row) {
  const a = row.args || {}
  const sbx = await Sandbox.connect(row.id, {
    apiKey: 'e2b_sandgate_test',
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: row.sandboxUrl || process.env.E2B_SANDBOX_URL,
  })
  const user = a.USER_NAME || undefined
  const timeoutMs = a.TIMEOUT_MS ? Number(a.TIMEOUT_MS) : undefined
  let pid = Number(a.PID || 4242)
  if (a.START_BG) {
    const h = await sbx.commands.run(a.START_BG, { background: true })
    pid = h.pid
    await h.disconnect()
  }
  const P = a.P || `${dir}/x.txt`
  const P2 = a.P2 || `${dir}/y.txt`
  const calls = {
    run: () => sbx.commands.run(a.CMD || 'true', { cwd: a.CWD || undefined, user, timeoutMs }),
    connect: async () => (await sbx.commands.connect(pid, { timeoutMs })).wait(),
    list: () => sbx.files.list(P, { user }),
    remove: () => sbx.files.remove(P, { user }),
    exists: () => sbx.files.exists(P, { user }),
    getInfo: async () => (await sbx.files.getInfo(P, { user })).name,
    makeDir: () => sbx.files.makeDir(P, { user }),
    rename: async () => (await sbx.files.rename(P, P2, { user })).name,
    read: () => sbx.files.read(P, { user }),
    write: async () => (await sbx.files.write(P, 'x', { user })).name,
    writeGzip: async () => (await sbx.files.write(P, 'x'.repeat(64 << 10), { user, gzip: true, useOctetStream: true })).name,
    processes: async () => (await sbx.commands.list()).length,
    kill: () => sbx.commands.kill(pid),
    sendStdin: () => sbx.commands.sendStdin(pid, 'x'),
    isRunning: () => sbx.isRunning(),
    watchDir: async () => (await sbx.files.watchDir(P, () => {}, { user, timeoutMs })).stop(),
  }
  const results = await Promise.all(row.routes.map((r) => attempt(calls[r])))
  return Object.fromEntries(row.routes.map((r, i) => [r, results[i]]))
}

// Scenarios that manage the sandbox themselves (no connect first).
const standalone = {
  async matrix() {
    const plan = JSON.parse(process.env.PLAN)
    const rows = await Promise.all(plan.map((row) => attempt(() => matrixRow(row))))
    return Object.fromEntries(plan.map((row, i) => [row.name, rows[i]]))
  },

  // E2B_DOMAIN and E2B_API_KEY only: create (NETWORK), a command and a
  // file, connect, getHost(PORT) then fetch and a WebSocket round trip
  // (with the traffic token when the sandbox has one, and once without),
  // kill.
  async domain() {
    const sbx = await Sandbox.create('base', { network: process.env.NETWORK ? JSON.parse(process.env.NETWORK) : undefined })
    const out = { sandboxId: sbx.sandboxId }
    out.run = await sbx.commands.run('echo created')
    out.write = await sbx.files.write(`${dir}/hello.txt`, 'hello domain\n')
    const again = await Sandbox.connect(sbx.sandboxId)
    out.connectedId = again.sandboxId
    out.read = await again.files.read(`${dir}/hello.txt`)
    const host = sbx.getHost(Number(process.env.PORT))
    out.host = host
    const token = sbx.trafficAccessToken
    out.hasTrafficToken = typeof token === 'string' && token !== ''
    const headers = out.hasTrafficToken ? { 'e2b-traffic-access-token': token } : {}
    const plain = await fetch(`https://${host}/hello?q=1`)
    out.fetchWithout = { status: plain.status, code: plain.headers.get('sandgate-error-code'), body: await plain.text() }
    const res = await fetch(`https://${host}/hello?q=1`, { method: 'POST', headers, body: 'payload' })
    out.fetch = { status: res.status, body: await res.text() }
    out.ws = await attempt(() => wsRoundTrip(host, '/ws', headers, 'ping'))
    out.kill = await attempt(() => sbx.kill())
    return out
  },

  // Sandbox.create({ network }) against the control API (corectl), a command
  // and a file, Sandbox.connect(id) to the same sandbox, then kill(); a
  // second kill and a connect after it show the sandbox is gone.
  async lifecycle() {
    const opts = {
      apiKey: process.env.E2B_API_KEY || 'e2b_sandgate_test',
      apiUrl: process.env.E2B_API_URL,
      sandboxUrl: process.env.E2B_SANDBOX_URL,
    }
    const network = process.env.NETWORK ? JSON.parse(process.env.NETWORK) : undefined
    const sbx = await Sandbox.create('base', { ...opts, network })
    const out = { sandboxId: sbx.sandboxId }
    out.run = await sbx.commands.run('echo created')
    out.write = await sbx.files.write(`${dir}/hello.txt`, 'hello corectl\n')
    const again = await Sandbox.connect(sbx.sandboxId, opts)
    out.connectedId = again.sandboxId
    out.read = await again.files.read(`${dir}/hello.txt`)
    out.runAgain = await again.commands.run('echo connected')
    // JS 2.51 resolves kill() to true; 2.25 to undefined.
    out.kill = await attempt(() => sbx.kill())
    out.killAgain = await attempt(() => Sandbox.kill(sbx.sandboxId, opts))
    out.connectAfterKill = await attempt(() => Sandbox.connect(sbx.sandboxId, opts))
    return out
  },
}

// wsRoundTrip opens a WebSocket to wss://host+path (Node 20 has no
// WebSocket client), sends text and returns the first text message back.
async function wsRoundTrip(host, path, headers, text) {
  const https = await import('node:https')
  return new Promise((resolve, reject) => {
    const req = https.request({ host, port: 443, path, headers: { ...headers, Connection: 'Upgrade', Upgrade: 'websocket',
      'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': randomBytes(16).toString('base64') } })
    req.on('response', (res) => reject(new Error(`no upgrade: HTTP ${res.statusCode}`)))
    req.on('error', reject)
    req.on('upgrade', (res, socket) => {
      const payload = Buffer.from(text)
      const mask = randomBytes(4)
      const frame = Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask,
        Buffer.from(payload.map((b, i) => b ^ mask[i % 4]))])
      let buf = Buffer.alloc(0)
      socket.on('data', (d) => {
        buf = Buffer.concat([buf, d])
        if (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
          resolve(buf.subarray(2, 2 + (buf[1] & 0x7f)).toString())
          socket.destroy()
        }
      })
      socket.on('error', reject)
      socket.write(frame)
    })
    req.end()
  })
}

// pollRefused runs a command with sbx (its token as it was) until the
// gateway refuses it with a SANDBOX_* code, for at most limitMs; it reports
// how long that took, what the SDK raised, and any other error met on the
// way (kept, not counted as the refusal).
async function pollRefused(sbx, limitMs) {
  const t0 = Date.now()
  const others = []
  for (;;) {
    try {
      await sbx.commands.run('true', { requestTimeoutMs: 5000 })
    } catch (err) {
      const e = describe(err)
      if (/SANDBOX_[A-Z_]+/.test(e.message)) return { refused: true, ms: Date.now() - t0, error: e, others }
      others.push(e)
    }
    if (Date.now() - t0 > limitMs) return { refused: false, ms: Date.now() - t0, others }
    await new Promise((r) => setTimeout(r, 100))
  }
}

standalone.authz = async function authz() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const out = {}
  // kill(), then the token the SDK object still holds.
  const a = await Sandbox.create('base', { ...opts, metadata: { scenario: 'authz' }, envs: { WHO: 'sdk' } })
  out.killed = a.sandboxId
  out.before = await attempt(() => a.commands.run('echo before'))
  out.metadata = (await a.getInfo()).metadata
  out.kill = await attempt(() => a.kill())
  out.afterKill = await pollRefused(a, 10000)
  // Expiry: alive before its end, refused once the end has passed. The
  // command runs before setTimeout brings the end 3 s ahead: created with
  // a 3 s timeout, a loaded machine could spend those 3 s before the
  // command reached the sandbox.
  const b = await Sandbox.create('base', { ...opts, timeoutMs: 60000 })
  out.expiring = b.sandboxId
  out.beforeExpiry = await attempt(() => b.commands.run('echo alive'))
  await b.setTimeout(3000)
  const info = await b.getInfo()
  out.endAt = info.endAt.toISOString()
  out.afterExpiry = await pollRefused(b, 20000)
  out.refusedAt = new Date().toISOString()
  // Another credential of the same namespace.
  const c = await Sandbox.create('base', opts)
  out.owned = c.sandboxId
  out.connectAsOther = await attempt(async () => (await Sandbox.connect(c.sandboxId, { ...opts, apiKey: process.env.OTHER_API_KEY })).sandboxId)
  out.infoAsOther = await attempt(() => Sandbox.getInfo(c.sandboxId, { ...opts, apiKey: process.env.OTHER_API_KEY }))
  out.killAsOther = await attempt(() => Sandbox.kill(c.sandboxId, { ...opts, apiKey: process.env.OTHER_API_KEY }))
  const foreign = await Sandbox.connect(c.sandboxId, { ...opts, apiUrl: process.env.FOREIGN_API_URL })
  out.foreignRun = await attempt(() => foreign.commands.run('echo foreign'))
  out.foreignList = await attempt(() => foreign.files.list('/home/user'))
  out.foreignRunning = await attempt(() => foreign.isRunning())
  out.ownerRun = await attempt(() => c.commands.run('echo owner'))
  out.ownerRunning = await attempt(() => c.isRunning())
  const t0 = Date.now()
  out.setTimeout = await attempt(() => c.setTimeout(120000))
  out.endAfterSetTimeoutMs = (await c.getInfo()).endAt.getTime() - t0
  out.ownerInfo = await attempt(async () => {
    const i = await c.getInfo()
    return { state: i.state, cpuCount: i.cpuCount, memoryMB: i.memoryMB, metadata: i.metadata, lifecycle: i.lifecycle }
  })
  out.listAsOwner = (await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId).sort()
  out.listAsOther = (await Sandbox.list({ ...opts, apiKey: process.env.OTHER_API_KEY }).nextItems()).map((s) => s.sandboxId)
  out.killOwned = await attempt(() => c.kill())
  return out
}

// The control API alone (no data plane): the metadata filter of
// Sandbox.list with the keys and values of METADATA, and the E2B calls
// sandgate does not serve, each with the error the SDK raises.
standalone.controlapi = async function controlapi() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const md = JSON.parse(process.env.METADATA)
  const out = {}
  const sbx = await Sandbox.create('base', { ...opts, metadata: md })
  const other = await Sandbox.create('base', { ...opts, metadata: { other: 'yes' } })
  out.sandboxId = sbx.sandboxId
  out.otherId = other.sandboxId
  const ids = async (metadata) => (await Sandbox.list({ ...opts, query: { metadata } }).nextItems()).map((s) => s.sandboxId).sort()
  out.byPair = {}
  for (const [k, v] of Object.entries(md)) out.byPair[k] = await ids({ [k]: v })
  out.byAll = await ids(md)
  out.byOtherValue = await ids({ [Object.keys(md)[0]]: 'another value' })
  const u = {}
  u.createSnapshot = await attempt(() => sbx.createSnapshot())
  u.listSnapshots = await attempt(() => Sandbox.listSnapshots(opts).nextItems())
  if (typeof sbx.fork === 'function') u.fork = await attempt(() => sbx.fork())
  if (e2b.Volume) {
    u.volumeCreate = await attempt(() => e2b.Volume.create('data', opts))
    u.volumeList = await attempt(() => e2b.Volume.list(opts))
  }
  if (e2b.Secret) u.secretList = await attempt(() => e2b.Secret.list(opts).nextItems())
  if (typeof e2b.Template?.getTags === 'function') u.templateTags = await attempt(() => e2b.Template.getTags('base', opts))
  out.unsupported = u
  out.kill = await attempt(() => sbx.kill())
  out.killOther = await attempt(() => other.kill())
  return out
}

// One Sandbox.list, for the API-key checks.
standalone.sandboxList = async function sandboxList() {
  return attempt(async () => (await Sandbox.list({ apiKey: process.env.E2B_API_KEY, apiUrl: process.env.E2B_API_URL }).nextItems()).length)
}

// The control API under a key rotation (integration/rotation): Sandbox.list,
// Sandbox.getInfo, and every fourth round Sandbox.create and Sandbox.kill,
// with E2B_API_KEY, round after round until STOP_FILE exists; READY_FILE is
// created after the first round. Every call's failure is kept.
standalone.apiKeyTraffic = async function apiKeyTraffic() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const out = { calls: 0, rounds: 0, errors: [] }
  const call = async (what, fn) => {
    out.calls++
    const r = await attempt(fn)
    if (!r.ok) out.errors.push({ call: what, error: r.error })
    return r
  }
  const sbx = await call('Sandbox.create', () => Sandbox.create('base', opts))
  if (!sbx.ok) return out
  const id = sbx.value.sandboxId
  while (!existsSync(process.env.STOP_FILE)) {
    await call('Sandbox.list', () => Sandbox.list(opts).nextItems())
    await call('Sandbox.getInfo', () => Sandbox.getInfo(id, opts))
    if (out.rounds % 4 === 3) {
      const c = await call('Sandbox.create', () => Sandbox.create('base', opts))
      if (c.ok) await call('Sandbox.kill', () => Sandbox.kill(c.value.sandboxId, opts))
    }
    if (out.rounds++ === 0) writeFileSync(process.env.READY_FILE, '')
  }
  await call('Sandbox.kill', () => Sandbox.kill(id, opts))
  return out
}

// The real-peer tier (integration/realpeers): every operation of a short
// session against corectl and the gateway in front of the real OpenSandbox
// controller, ingress and execd. integration/realpeers/python/scenario.py is
// its Python twin.
standalone.peers = async function peers() {
  const opts = {
    apiKey: process.env.E2B_API_KEY || 'e2b_sandgate_test',
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 300000 })
  const out = { sandboxId: sbx.sandboxId }
  const run = await sbx.commands.run('echo created')
  out.run = { exitCode: run.exitCode, stdout: run.stdout }
  out.write = { path: (await sbx.files.write(`${dir}/hello.txt`, 'hello peers\n')).path }
  out.read = await sbx.files.read(`${dir}/hello.txt`)
  out.filesList = (await sbx.files.list(dir)).map((e) => e.name).sort()
  out.sandboxList = (await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId).sort()
  const t0 = Date.now()
  await sbx.setTimeout(120000)
  out.endAfterSetTimeoutMs = (await sbx.getInfo()).endAt.getTime() - t0
  const again = await Sandbox.connect(sbx.sandboxId, opts)
  out.connectedId = again.sandboxId
  const runAgain = await again.commands.run('echo connected')
  out.runAgain = { exitCode: runAgain.exitCode, stdout: runAgain.stdout }
  // JS 2.51 resolves kill() to true; 2.25 to undefined.
  out.kill = await attempt(() => sbx.kill())
  out.killAgain = await attempt(() => Sandbox.kill(sbx.sandboxId, opts))
  out.connectAfterKill = await attempt(async () => (await Sandbox.connect(sbx.sandboxId, opts)).sandboxId)
  return out
}

// E2B's network surface: Sandbox.create({ allowInternetAccess: false,
// network: { denyOut } }), then sbx.updateNetwork(...) with E2B's bodies;
// after each step corectl's own GET /sandboxes/{id}/network (the policy as
// read back from the apiserver) is recorded. Refusals (a domain name) are
// attempts; the sandbox is killed at the end.
standalone.network = async function network() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const view = async (id) => {
    const res = await fetch(`${opts.apiUrl}/sandboxes/${id}/network`, { headers: { 'X-API-Key': opts.apiKey } })
    const body = await res.json()
    return { status: res.status, networkReady: body.networkReady, configuredEgress: body.configuredEgress, lastVerifiedEgress: body.lastVerifiedEgress }
  }
  const out = { hasUpdateNetwork: typeof Sandbox.prototype.updateNetwork === 'function' }
  const closed = await Sandbox.create('base', { ...opts, allowInternetAccess: false })
  out.closed = await view(closed.sandboxId)
  await closed.kill()
  const sbx = await Sandbox.create('base', { ...opts, network: { denyOut: ['10.0.0.0/8'] } })
  out.created = await view(sbx.sandboxId)
  out.steps = []
  for (const upd of [
    { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] },
    { allowInternetAccess: false },
    { denyOut: ['169.254.169.254'] },
    { allowOut: ['api.example.com'] },
  ]) {
    const r = await attempt(() => sbx.updateNetwork(upd))
    out.steps.push({ update: upd, ok: r.ok, error: r.error, view: await view(sbx.sandboxId) })
  }
  out.run = await attempt(() => sbx.commands.run('echo after'))
  out.kill = await attempt(() => sbx.kill())
  return out
}

// A credential with limits {concurrentSandboxes: 1, createsPerMinute: 2,
// maxTimeoutSeconds: 600}: the second live sandbox and the third create in
// a minute are refused (429: RateLimitError), a longer timeout too (400),
// at create and at setTimeout.
standalone.limits = async function limits() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const out = {}
  const a = await Sandbox.create('base', opts)
  out.second = await attempt(() => Sandbox.create('base', opts))
  out.setTimeoutOver = await attempt(() => a.setTimeout(601000))
  out.setTimeoutWithin = await attempt(() => a.setTimeout(600000))
  out.killFirst = await attempt(() => a.kill())
  const c = await Sandbox.create('base', opts)
  out.killSecond = await attempt(() => c.kill())
  out.third = await attempt(() => Sandbox.create('base', opts))
  out.longTimeout = await attempt(() => Sandbox.create('base', { ...opts, timeoutMs: 601000 }))
  return out
}


// publicSurface reads the SDK's own type declarations (dist/index.d.ts of
// E2B_PACKAGE) and returns the public methods of Sandbox (static and
// instance, SandboxApi's included) and of the objects it hands out
// (sbx.commands, sbx.files, sbx.pty, a command handle, a watch handle),
// each named as the "surface" scenario names its calls. Members declared
// private or protected, getters, fields and constructors are left out.
async function publicSurface() {
  const { readFile } = await import('node:fs/promises')
  const { createRequire } = await import('node:module')
  const entry = createRequire(import.meta.url).resolve(pkg)
  const dts = await readFile(entry.replace(/index\.js$/, 'index.d.ts'), 'utf8')
  const prefixes = {
    Sandbox: ['Sandbox.', 'sbx.'], SandboxApi: ['Sandbox.', 'sbx.'], Commands: [null, 'sbx.commands.'],
    Filesystem: [null, 'sbx.files.'], Pty: [null, 'sbx.pty.'], CommandHandle: [null, 'handle.'], WatchHandle: [null, 'watchHandle.'],
  }
  const names = new Set()
  for (const [cls, [staticPrefix, instancePrefix]] of Object.entries(prefixes)) {
    const start = dts.search(new RegExp(`^declare (abstract )?class ${cls}\\b[^\\n]*\\{$`, 'm'))
    if (start < 0) throw new Error(`${pkg}: no class ${cls} in index.d.ts`)
    const body = dts.slice(start, dts.indexOf('\n}', start)).split('\n').slice(1)
    const indent = Math.min(...body.filter((l) => /^\s+\S/.test(l) && !/^\s*(\/\*\*|\*)/.test(l)).map((l) => l.match(/^\s*/)[0].length))
    for (const line of body) {
      if (line.match(/^\s*/)[0].length !== indent) continue
      const m = line.trim().match(/^(static\s+)?(?:async\s+)?([A-Za-z_$][\w$]*)\s*[<(]/)
      if (!m || m[2] === 'constructor') continue
      const prefix = m[1] ? staticPrefix : instancePrefix
      if (prefix) names.add(prefix + m[2])
    }
  }
  return [...names].sort()
}

// The SDK surface as a table (docs/corectl.md "The SDK surface"): every
// public method publicSurface finds, called once against corectl and the
// gateway (extended_operations on), each result an attempt; a method this
// SDK version does not have is {absent: true}, a method of an object the
// scenario could not get (the call that makes it was refused) is
// {unreachable: true}. Uses E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL and SCENARIO_DIR.
standalone.surface = async function surface() {
  const opts = {
    apiKey: process.env.E2B_API_KEY,
    apiUrl: process.env.E2B_API_URL,
    sandboxUrl: process.env.E2B_SANDBOX_URL,
  }
  const calls = {}
  const call = async (name, target, fn) => {
    if (target === unreachable) {
      calls[name] = { unreachable: true }
      return undefined
    }
    if (typeof target !== 'function') {
      calls[name] = { absent: true }
      return undefined
    }
    const r = await attempt(fn)
    calls[name] = { ok: r.ok, error: r.error }
    if (r.ok && ['boolean', 'number', 'string'].includes(typeof r.value)) calls[name].value = r.value
    return r.ok ? r.value : undefined
  }
  // Using a URL the SDK made: an error unless the answer is 2xx.
  const use = async (url, init) => {
    const res = await fetch(url, init)
    const body = await res.text()
    if (!res.ok) throw new Error(`HTTP ${res.status} ${res.headers.get('sandgate-error-code') ?? ''}: ${body.slice(0, 200)}`)
    return body
  }
  const network = { allowOut: ['198.51.100.7'] }
  const unreachable = Symbol('unreachable')

  const sbx = await call('Sandbox.create', Sandbox.create, () => Sandbox.create('base', { ...opts, timeoutMs: 300000 }))
  if (!sbx) return { calls, surface: await publicSurface() }
  const other = await Sandbox.create('base', opts)
  const id = sbx.sandboxId

  // The class's calls on a sandbox ID.
  await call('Sandbox.connect', Sandbox.connect, async () => (await Sandbox.connect(id, opts)).sandboxId)
  await call('Sandbox.list', Sandbox.list, async () => (await Sandbox.list(opts).nextItems()).length)
  await call('Sandbox.getInfo', Sandbox.getInfo, async () => (await Sandbox.getInfo(id, opts)).sandboxId)
  await call('Sandbox.getFullInfo', Sandbox.getFullInfo, async () => (await Sandbox.getFullInfo(id, opts)).sandboxId)
  await call('Sandbox.getMetrics', Sandbox.getMetrics, () => Sandbox.getMetrics(id, opts))
  await call('Sandbox.setTimeout', Sandbox.setTimeout, () => Sandbox.setTimeout(id, 240000, opts))
  await call('Sandbox.updateNetwork', Sandbox.updateNetwork, () => Sandbox.updateNetwork(id, network, opts))
  await call('Sandbox.pause', Sandbox.pause, () => Sandbox.pause(id, opts))
  await call('Sandbox.betaPause', Sandbox.betaPause, () => Sandbox.betaPause(id, opts))
  await call('Sandbox.createSnapshot', Sandbox.createSnapshot, () => Sandbox.createSnapshot(id, opts))
  await call('Sandbox.listSnapshots', Sandbox.listSnapshots, () => Sandbox.listSnapshots(opts).nextItems())
  await call('Sandbox.deleteSnapshot', Sandbox.deleteSnapshot, () => Sandbox.deleteSnapshot('snapshot-1', opts))
  await call('Sandbox.fork', Sandbox.fork, () => Sandbox.fork(id, opts))

  // The instance's control-API calls.
  await call('sbx.connect', sbx.connect, async () => (await sbx.connect(opts)).sandboxId)
  await call('sbx.getHost', sbx.getHost, () => sbx.getHost(8080))
  await call('sbx.isRunning', sbx.isRunning, () => sbx.isRunning())
  await call('sbx.getInfo', sbx.getInfo, async () => (await sbx.getInfo()).sandboxId)
  await call('sbx.getMetrics', sbx.getMetrics, () => sbx.getMetrics())
  await call('sbx.setTimeout', sbx.setTimeout, () => sbx.setTimeout(300000))
  await call('sbx.updateNetwork', sbx.updateNetwork, () => sbx.updateNetwork(network))
  await call('sbx.pause', sbx.pause, () => sbx.pause())
  await call('sbx.betaPause', sbx.betaPause, () => sbx.betaPause())
  await call('sbx.createSnapshot', sbx.createSnapshot, () => sbx.createSnapshot())
  await call('sbx.listSnapshots', sbx.listSnapshots, () => sbx.listSnapshots().nextItems())
  await call('sbx.fork', sbx.fork, () => sbx.fork())
  await call('sbx.getMcpUrl', sbx.getMcpUrl, () => sbx.getMcpUrl())
  await call('sbx.getMcpToken', sbx.getMcpToken, () => sbx.getMcpToken())

  // Files.
  const f = sbx.files
  await call('sbx.files.makeDir', f.makeDir, () => f.makeDir(`${dir}/sub`))
  await call('sbx.files.write', f.write, async () => (await f.write(`${dir}/a.txt`, 'surface\n')).path)
  await call('sbx.files.writeFiles', f.writeFiles, async () => (await f.writeFiles([{ path: `${dir}/b.txt`, data: 'b' }])).length)
  await call('sbx.files.read', f.read, () => f.read(`${dir}/a.txt`))
  await call('sbx.files.list', f.list, async () => (await f.list(dir)).map((e) => e.name).sort())
  await call('sbx.files.exists', f.exists, () => f.exists(`${dir}/a.txt`))
  await call('sbx.files.getInfo', f.getInfo, async () => (await f.getInfo(`${dir}/a.txt`)).size)
  await call('sbx.files.rename', f.rename, async () => (await f.rename(`${dir}/b.txt`, `${dir}/sub/b.txt`)).path)
  await call('sbx.files.remove', f.remove, () => f.remove(`${dir}/sub/b.txt`))
  const watch = await call('sbx.files.watchDir', f.watchDir, () => f.watchDir(dir, () => {}))
  await call('watchHandle.stop', watch ? watch.stop : unreachable, () => watch.stop())
  await call('sbx.downloadUrl', sbx.downloadUrl, async () => use(await sbx.downloadUrl(`${dir}/a.txt`)))
  await call('sbx.uploadUrl', sbx.uploadUrl, async () => {
    const form = new FormData()
    form.append('file', new Blob(['uploaded\n']), 'c.txt')
    return use(await sbx.uploadUrl(`${dir}/c.txt`), { method: 'POST', body: form })
  })

  // Commands and their handles.
  const c = sbx.commands
  await call('sbx.commands.run', c.run, async () => (await c.run('echo hi')).stdout)
  const bg = await c.run('while true; do sleep 1; done', { background: true, stdin: true })
  await call('sbx.commands.list', c.list, async () => (await c.list()).some((p) => p.pid === bg.pid))
  const conn = await call('sbx.commands.connect', c.connect, () => c.connect(bg.pid))
  await call('sbx.commands.sendStdin', c.sendStdin, () => c.sendStdin(bg.pid, 'x'))
  await call('handle.sendStdin', bg.sendStdin, () => bg.sendStdin('x'))
  await call('sbx.commands.closeStdin', c.closeStdin, () => c.closeStdin(bg.pid))
  await call('handle.closeStdin', bg.closeStdin, () => bg.closeStdin())
  await call('handle.disconnect', bg.disconnect, () => bg.disconnect())
  await call('sbx.commands.kill', c.kill, () => c.kill(bg.pid))
  if (conn) await attempt(() => conn.wait())
  const short = await c.run('echo done', { background: true })
  await call('handle.wait', short.wait, async () => (await short.wait()).stdout)
  const long = await c.run('while true; do sleep 1; done', { background: true })
  await call('handle.kill', long.kill, () => long.kill())
  await attempt(() => long.wait())

  // The PTY; without one (pty.create refused) the other calls name a
  // plain background command, as a user holding a pid could.
  const p = sbx.pty
  const pty = await call('sbx.pty.create', p.create, () => p.create({ cols: 80, rows: 24, onData: () => {} }))
  const ptyPid = pty?.pid ?? (await c.run('while true; do sleep 1; done', { background: true })).pid
  await call('sbx.pty.connect', p.connect, () => p.connect(ptyPid, { onData: () => {} }))
  await call('sbx.pty.sendInput', p.sendInput, () => p.sendInput(ptyPid, new TextEncoder().encode('x')))
  await call('sbx.pty.resize', p.resize, () => p.resize(ptyPid, { cols: 100, rows: 30 }))
  await call('sbx.pty.kill', p.kill, () => p.kill(ptyPid))

  // The end of both sandboxes.
  await call('sbx.kill', sbx.kill, () => sbx.kill())
  await call('Sandbox.kill', Sandbox.kill, () => Sandbox.kill(other.sandboxId, opts))
  return { calls, surface: await publicSurface() }
}


// A standalone scenario must not share a name with a scenario: it would
// hide it, and the tests that ask for the hidden one would run the other.
const shadowed = Object.keys(standalone).filter((k) => scenarios[k])
if (shadowed.length > 0) {
  console.error(`standalone scenarios hide scenarios of the same name: ${shadowed.join(', ')}`)
  process.exit(2)
}

const name = process.argv[2]
if (!scenarios[name] && !standalone[name]) {
  console.error(`unknown scenario ${name}; one of ${[...Object.keys(scenarios), ...Object.keys(standalone)].join(', ')}`)
  process.exit(2)
}
const result = standalone[name] ? await standalone[name]() : await scenarios[name](await connect())
console.log(JSON.stringify({ package: pkg, scenario: name, result }))
