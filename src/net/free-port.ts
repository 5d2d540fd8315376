import { createServer } from 'node:net';
import { SandboxError } from '../errors.js';

/**
 * Ports this process has handed out. The kernel gives an ephemeral port again once its probe socket is closed, so
 * before the component it was picked for has bound it, a later call could get the same one: with 20 sandboxd nodes
 * starting, sandbox-apiserver was once given a node's port (EADDRINUSE). A port is handed out once per process.
 */
const handedOut = new Set<number>();

/** A TCP port on `host` that is free now and that no earlier call of this process returned. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = await probe(host);
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new SandboxError('cluster.network', `no free port on ${host} that this process has not handed out already`, {
    hint: "check the host's ephemeral port range (net.ipv4.ip_local_port_range)",
  });
}

function probe(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
