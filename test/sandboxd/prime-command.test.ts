/**
 * The command a warm pool primes each VM with (src/guest/images.ts primeCommand): e2b's SDK runs every command in a
 * login shell, so a template with bash is primed with one, found from the VM's template name as sandboxd gives it
 * (`<guest template>@<net>-<size>`); the earlier lookup used that whole name, found nothing and primed with `true`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GUEST_TEMPLATES, primeCommand } from '../../src/guest/index.js';

describe('warm-VM priming command', () => {
  it('is a login shell for every guest template with bash, found from the pool VM template name', () => {
    const withBash = Object.values(GUEST_TEMPLATES).filter((t) => t.packages?.includes('bash'));
    assert.ok(withBash.length >= 2, `only ${withBash.map((t) => t.name).join(', ')} have bash`);
    for (const t of withBash) {
      for (const vmTemplate of [`${t.name}@egress-small`, `${t.name}:latest@none-medium`, t.name])
        assert.deepEqual(primeCommand(vmTemplate).slice(0, 3), ['/bin/bash', '-l', '-c'], vmTemplate);
    }
  });

  it('is `true` where the template is not one of ours (a user-named checkpoint, a template without bash)', () => {
    assert.deepEqual(primeCommand('my-checkpoint@sbx-123'), ['true']);
    for (const t of Object.values(GUEST_TEMPLATES).filter((t) => !t.packages?.includes('bash')))
      assert.deepEqual(primeCommand(`${t.name}@none-small`), ['true'], t.name);
  });
});
