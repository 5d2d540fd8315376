/**
 * The manifests' container args come from the binaries' own option definitions: a flag a binary does not define,
 * or a value its parser rejects, fails the generator with the binary's name and the flag.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { apiServerCommand } from '../../src/apiserver/options.js';
import { SandboxError } from '../../src/errors.js';
import { containerArgs } from '../../src/deploy/flags.js';
import { VARIANTS } from '../../src/deploy/model.js';
import { concrete } from '../../src/deploy/params.js';
import { buildContext } from '../../src/deploy/parts.js';
import { apiserverFlags, operatorFlags, sandboxdFlags } from '../../src/deploy/workloads.js';
import { operatorCommand, toConfig } from '../../src/operator/options.js';
import { sandboxdCommand } from '../../src/sandboxd/options.js';

const c = buildContext(VARIANTS[0]!);

describe('container args from the option definitions', () => {
  it('a flag the binary does not define fails the generator, naming the binary and the flag', () => {
    assert.throws(
      () =>
        containerArgs(
          {
            command: operatorCommand,
            flags: [
              ['leader-elect', true],
              ['leader-election', true],
            ],
          },
          c.p,
        ),
      (err: unknown) =>
        err instanceof SandboxError &&
        /sandbox-operator defines no --leader-election\b/.test(err.message) &&
        !!err.hint,
    );
    assert.throws(
      () => containerArgs({ command: sandboxdCommand, flags: [['listen-address', '0.0.0.0:7777']] }, c.p),
      /sandboxd defines no --listen-address/,
    );
  });

  it("a value the binary's parser rejects fails the generator", () => {
    assert.throws(
      () =>
        containerArgs(
          { command: operatorCommand, flags: [['sandbox-warm-pool-readiness-grace-period', '5 minutes']] },
          c.p,
        ),
      /sandbox-operator rejects .*duration/,
    );
    assert.throws(
      () => containerArgs({ command: apiServerCommand, flags: [['secure-port', 'https']] }, c.p),
      /secure-port/,
    );
  });

  it('what the manifests pass parses into the configuration each binary runs with', () => {
    for (const v of VARIANTS) {
      const ctx = buildContext(v);
      const argv = (flags: ReturnType<typeof operatorFlags>, cmd: typeof operatorCommand) =>
        containerArgs({ command: cmd, flags }, ctx.p).map((a) => String(concrete(a)));
      const op = operatorCommand().parse(argv(operatorFlags(ctx), operatorCommand), { from: 'user' });
      const config = toConfig(op.opts());
      assert.equal(config.leaderElect, true);
      assert.equal(config.webhookNamespace, 'sandbox-system');
      assert.equal(config.manageWebhookCerts, !v.certManager, 'cert-manager supplies the certificate, or the operator');
      const sd = sandboxdCommand()
        .parse(argv(sandboxdFlags(ctx), sandboxdCommand), { from: 'user' })
        .opts();
      assert.equal(
        sd.vkNodes,
        v.layout === 'crd' ? 'vk-cocoon,sandboxd' : '',
        'virtual kubelets in the CRD layout only',
      );
      const as = apiServerCommand()
        .parse(argv(apiserverFlags(ctx), apiServerCommand), { from: 'user' })
        .opts();
      assert.equal(as.serviceNamespace, 'sandbox-system');
      assert.equal(as.tlsCertFile, '/etc/sandbox-apiserver/tls/tls.crt');
    }
  });
});
