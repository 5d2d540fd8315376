/**
 * Which sandbox a signed file URL is for, when the URL does not say: the SDK builds `uploadUrl` / `downloadUrl` on
 * its "direct" envd URL, which with `E2B_SANDBOX_URL` (the local platform's setting) is the router's address itself,
 * so the URL carries the path, the user and the signature but no sandbox id (docs/e2b.md "URLs the SDK builds").
 * The signature is a MAC under the sandbox's envd token (src/api/envd.ts fileSignature), so it names the one
 * sandbox whose token made it: each sandbox of the namespace is tried, with its token read once from its node
 * (the tokens are derived there; the apiserver stores none). The cost is one hash per sandbox of the namespace
 * per request, and one node call per sandbox the first time; a deployment with `--e2b-domain` names the sandbox
 * in the host instead and never comes here. envd still checks the signature and its expiration. The comparison is
 * constant-time: a timed guess must not learn a valid signature byte by byte.
 */
import { envdAccessToken, fileSignature, sameSecret } from '../../api/envd.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import type { SandboxdClient } from '../sandboxes/sandboxd-client.js';
import type { SandboxStore } from '../sandboxes/store.js';

export class SignedUrlIndex {
  /** envd tokens by claim id (a claim's token never changes), pruned to the namespace's live claims. */
  private readonly tokens = new Map<string, Promise<string | undefined>>();

  constructor(
    private readonly store: SandboxStore,
    private readonly client: SandboxdClient,
    private readonly namespace: string,
  ) {}

  /** The sandbox whose envd token signed this `/files` URL, or undefined (then the router answers 400). */
  async find(method: string | undefined, url: URL): Promise<SandboxEntry | undefined> {
    const signature = url.searchParams.get('signature');
    if (url.pathname !== '/files' || !signature || (method !== 'GET' && method !== 'POST')) return undefined;
    const op = method === 'GET' ? 'read' : 'write';
    const rawExp = url.searchParams.get('signature_expiration');
    const exp = rawExp && /^\d{1,15}$/.test(rawExp) ? Number(rawExp) : undefined;
    const path = url.searchParams.get('path') ?? '';
    const user = url.searchParams.get('username') ?? '';
    const entries = this.store.snapshot(this.namespace);
    const live = new Set(entries.map((e) => e.claimId));
    for (const id of this.tokens.keys()) if (!live.has(id)) this.tokens.delete(id);
    const tokens = await Promise.all(entries.map((e) => this.token(e)));
    return entries.find(
      (_, i) => tokens[i] !== undefined && sameSecret(fileSignature(path, op, user, tokens[i], exp), signature),
    );
  }

  private token(e: SandboxEntry): Promise<string | undefined> {
    let p = this.tokens.get(e.claimId);
    if (!p) {
      p = this.client
        .call(e.node, e.address, 'GET', `/v1/sandboxes/${encodeURIComponent(e.claimId)}`)
        .then((row) => envdAccessToken((row as { token: string }).token))
        .catch(() => undefined);
      this.tokens.set(e.claimId, p);
      // A node that did not answer is asked again next time.
      void p.then((t) => t === undefined && this.tokens.delete(e.claimId));
    }
    return p;
  }
}
