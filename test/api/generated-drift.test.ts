/**
 * Fails when a checked-in generated file differs from what `npm run generate` produces.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { renderCrdFiles } from '../../src/api/crd.js';
import { GENERATED_DIRS, renderDeployFiles } from '../../src/deploy/index.js';
import {
  CORE_GEN_JSON,
  CORE_GEN_TS,
  KUBERNETES_VERSION,
  META_GEN_JSON,
  readCoreSources,
  renderCore,
  renderMeta,
} from '../../scripts/generate.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const crdDir = join(repoRoot, 'deploy/crds');

function goModuleCached(): string | false {
  try {
    const modCache = execFileSync('go', ['env', 'GOMODCACHE'], { encoding: 'utf8' }).trim();
    return existsSync(join(modCache, `k8s.io/kubernetes@v${KUBERNETES_VERSION}`)) ? modCache : false;
  } catch {
    return false;
  }
}

describe('generated files', () => {
  it('deploy/crds matches the schemas in src/api', () => {
    const files = renderCrdFiles();
    const onDisk = readdirSync(crdDir)
      .filter((f) => f.endsWith('.yaml'))
      .sort();
    assert.deepEqual(onDisk, Object.keys(files).sort(), 'deploy/crds holds exactly the generated files');
    for (const [name, content] of Object.entries(files)) {
      assert.ok(
        readFileSync(join(crdDir, name), 'utf8') === content,
        `deploy/crds/${name} is stale: run npm run generate`,
      );
    }
  });

  it('deploy/helm, deploy/kustomize, deploy/monitoring and deploy/aggregated match src/deploy', () => {
    const files = renderDeployFiles();
    for (const [path, content] of Object.entries(files)) {
      const full = join(repoRoot, path);
      assert.ok(existsSync(full), `${path} is missing: run npm run generate`);
      assert.ok(readFileSync(full, 'utf8') === content, `${path} is stale: run npm run generate`);
    }
    for (const dir of GENERATED_DIRS)
      for (const f of readdirSync(join(repoRoot, dir), { recursive: true, withFileTypes: true }))
        if (f.isFile()) {
          const rel = join(f.parentPath, f.name).slice(repoRoot.length + 1);
          assert.ok(rel in files, `${rel} is not generated: remove it or generate it from src/deploy`);
        }
  });

  it(
    'src/api/generated/core-v1.36.gen.* matches the Kubernetes OpenAPI document',
    { skip: !goModuleCached() && `k8s.io/kubernetes@v${KUBERNETES_VERSION} is not in the Go module cache` },
    async () => {
      const { json, ts } = await renderCore(readCoreSources());
      assert.ok(
        readFileSync(CORE_GEN_JSON, 'utf8') === json,
        'core-v1.36.gen.json is stale: npm run generate -- --core',
      );
      assert.ok(readFileSync(CORE_GEN_TS, 'utf8') === ts, 'core-v1.36.gen.ts is stale: npm run generate -- --core');
    },
  );

  it(
    'src/apiserver/generated/meta-v1.36.gen.json matches the Kubernetes OpenAPI documents',
    { skip: !goModuleCached() && `k8s.io/kubernetes@v${KUBERNETES_VERSION} is not in the Go module cache` },
    async () => {
      assert.ok(
        readFileSync(META_GEN_JSON, 'utf8') === (await renderMeta()),
        'meta-v1.36.gen.json is stale: npm run generate -- --core',
      );
    },
  );
});
