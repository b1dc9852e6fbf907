// Starts `moeflux serve` on the shipped demo model for an end-to-end test: --port 0, the port
// read from the start-up line ("moeflux serve: http://HOST:PORT  model ..."), stopped with
// SIGTERM (SIGKILL after 10 s). A server still running when node exits (a test's failure or
// timeout, a signal) is killed, so that no test leaves one behind.
import {spawn} from 'node:child_process';
import {fileURLToPath} from 'node:url';
import path from 'node:path';

export const SOURCE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const DEMO_MODEL = path.join(SOURCE_DIR, 'models/demo-qwen3-moe-q4');
export const DEMO_NAME = 'demo-qwen3-moe-q4';

// The moeflux executable: the first argument (CTest passes $<TARGET_FILE:moeflux>) or $MOEFLUX_EXE.
export function moefluxExe() {
  const exe = process.argv[2] || process.env.MOEFLUX_EXE;
  if (!exe) throw new Error('usage: node TEST.mjs PATH/TO/moeflux (or MOEFLUX_EXE=...)');
  return exe;
}

const live = new Set();
function killAll() {
  for (const p of live) p.kill('SIGKILL');
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    killAll();
    process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1));
  });
}

// Resolves to {url, port, proc, log(), stop()} once the start-up line is printed; rejects if the
// server exits first or prints nothing within startMs.
export function startServer(exe, extraArgs = [], {startMs = 60000} = {}) {
  const args = ['serve', '-m', DEMO_MODEL, '--port', '0', ...extraArgs];
  const proc = spawn(exe, args, {stdio: ['ignore', 'pipe', 'pipe']});
  live.add(proc);
  // The server alone does not keep node from exiting: a test that times out ends the run (the 'exit'
  // handler then kills the server) instead of hanging until CTest's timeout.
  proc.unref();
  proc.stdout.unref();
  proc.stderr.unref();
  let out = '', err = '';
  const exited = new Promise(resolve => proc.on('exit', (code, signal) => {
    live.delete(proc);
    resolve({code, signal});
  }));
  const log = () => `$ ${exe} ${args.join(' ')}\n--- stdout\n${out}--- stderr\n${err}`;
  proc.stderr.on('data', d => { err += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`no start-up line within ${startMs} ms\n${log()}`));
    }, startMs);
    proc.on('error', e => { clearTimeout(timer); reject(e); });
    exited.then(({code, signal}) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (code ${code}, signal ${signal}) before its start-up line\n${log()}`));
    });
    proc.stdout.on('data', d => {
      out += d;
      const m = /^moeflux serve: http:\/\/(\S+):(\d+)\s/m.exec(out);
      if (!m) return;
      clearTimeout(timer);
      const port = Number(m[2]);
      resolve({
        url: `http://${m[1]}:${port}`,
        port,
        proc,
        log,
        // Resolves to {code, signal} of the exit.
        async stop() {
          if (proc.exitCode === null && proc.signalCode === null) {
            proc.kill('SIGTERM');
            const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
            const r = await exited;
            clearTimeout(t);
            return r;
          }
          return exited;
        },
      });
    });
  });
}
