/**
 * Dev check against the reference CRDs in shared/reference (read at test time, never copied into the repo):
 * every field path, type, format, enum, default and validation rule of the reference exists in ours (and no default
 * the reference lacks: the apiserver would write it into stored objects), and the
 * CRD-level facts (names, scope, versions, printer columns, subresources, conversion) match.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { buildAllCrds } from '../../src/api/crd.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const sharedDir = process.env['SBX_SHARED_DIR'] ?? resolve(repoRoot, '../shared');
const referenceDirs = ['agent-sandbox-crds', 'agent-sandbox-upstream-crds'].map((d) => join(sharedDir, 'reference', d));

type Node = Record<string, unknown>;

/** Keywords whose value must be equal in ours (required is compared as a subset). */
const COMPARED = [
  'type',
  'format',
  'enum',
  'default',
  'pattern',
  'minimum',
  'maximum',
  'minLength',
  'maxLength',
  'minItems',
  'maxItems',
  'nullable',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-int-or-string',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-validations',
];

function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Node).sort(([a], [b]) => a.localeCompare(b)))
      : v,
  );
}

function compareSchemas(ref: Node, ours: Node | undefined, path: string, problems: string[]): void {
  if (ours === undefined) {
    problems.push(`${path}: missing`);
    return;
  }
  // A default is compared both ways: one the reference lacks is a value the apiserver writes into stored objects
  // that upstream's never carry (the reason a default differs at all is what users see, not the schema).
  if (ref['default'] === undefined && ours['default'] !== undefined)
    problems.push(`${path}: default is ${JSON.stringify(ours['default'])}, reference has none`);
  for (const key of COMPARED) {
    if (ref[key] === undefined) continue;
    if (canonical(ref[key]) !== canonical(ours[key])) {
      problems.push(`${path}: ${key} is ${JSON.stringify(ours[key])}, reference ${JSON.stringify(ref[key])}`);
    }
  }
  const ourRequired = new Set((ours['required'] as string[] | undefined) ?? []);
  for (const r of (ref['required'] as string[] | undefined) ?? []) {
    if (!ourRequired.has(r)) problems.push(`${path}: ${r} not required`);
  }
  for (const [name, sub] of Object.entries((ref['properties'] as Record<string, Node> | undefined) ?? {})) {
    compareSchemas(sub, (ours['properties'] as Record<string, Node> | undefined)?.[name], `${path}.${name}`, problems);
  }
  if (ref['items']) compareSchemas(ref['items'] as Node, ours['items'] as Node | undefined, `${path}[]`, problems);
  if (ref['additionalProperties'] && typeof ref['additionalProperties'] === 'object') {
    compareSchemas(
      ref['additionalProperties'] as Node,
      ours['additionalProperties'] as Node | undefined,
      `${path}{}`,
      problems,
    );
  }
  if (Array.isArray(ref['anyOf'])) {
    (ref['anyOf'] as Node[]).forEach((sub, i) =>
      compareSchemas(sub, (ours['anyOf'] as Node[] | undefined)?.[i], `${path}|anyOf[${i}]`, problems),
    );
  }
}

const ours = new Map(buildAllCrds().map((c) => [(c['metadata'] as Node)['name'] as string, c]));

// A clone without the shared folder beside it skips these; CI (CI=true) must check parity, so there it fails.
const inCi = process.env['CI'] === 'true';

for (const dir of referenceDirs) {
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.yaml')) : [];
  const title = `reference parity: ${dir.split('/').pop()}`;
  if (!files.length && inCi) {
    it(title, () =>
      assert.fail(
        `CI=true but there are no reference CRDs (*.yaml) in ${dir}: set SBX_SHARED_DIR to the shared folder ` +
          `(the one holding reference/${dir.split('/').pop()}; default: ../shared beside the repository)`,
      ),
    );
    continue;
  }
  describe(title, { skip: !files.length && `no reference CRDs in ${dir} (set SBX_SHARED_DIR)` }, () => {
    for (const file of files) {
      it(file, () => {
        const ref = parse(readFileSync(join(dir, file), 'utf8')) as Node;
        const name = (ref['metadata'] as Node)['name'] as string;
        const crd = ours.get(name);
        assert.ok(crd, `no CRD ${name} generated`);
        const refSpec = ref['spec'] as Node;
        const ourSpec = crd['spec'] as Node;
        assert.equal(ourSpec['group'], refSpec['group']);
        assert.equal(ourSpec['scope'], refSpec['scope']);
        assert.deepEqual(ourSpec['names'], refSpec['names']);
        const refConv = refSpec['conversion'] as Node | undefined;
        const ourConv = ourSpec['conversion'] as Node | undefined;
        assert.equal(ourConv?.['strategy'], refConv?.['strategy']);
        if (refConv) {
          const refHook = refConv['webhook'] as Node;
          const ourHook = ourConv!['webhook'] as Node;
          assert.deepEqual(ourHook['conversionReviewVersions'], refHook['conversionReviewVersions']);
          assert.equal(
            ((ourHook['clientConfig'] as Node)['service'] as Node)['path'],
            ((refHook['clientConfig'] as Node)['service'] as Node)['path'],
          );
        }
        const problems: string[] = [];
        for (const refVersion of refSpec['versions'] as Node[]) {
          const v = refVersion['name'] as string;
          const ourVersion = (ourSpec['versions'] as Node[]).find((x) => x['name'] === v);
          assert.ok(ourVersion, `${name}: version ${v} missing`);
          for (const key of ['served', 'storage', 'deprecated', 'deprecationWarning']) {
            assert.deepEqual(ourVersion[key], refVersion[key], `${name}/${v}: ${key}`);
          }
          assert.deepEqual(
            ourVersion['subresources'] ?? {},
            refVersion['subresources'] ?? {},
            `${name}/${v}: subresources`,
          );
          assert.deepEqual(
            ourVersion['additionalPrinterColumns'] ?? [],
            refVersion['additionalPrinterColumns'] ?? [],
            `${name}/${v}: printer columns`,
          );
          compareSchemas(
            (refVersion['schema'] as Node)['openAPIV3Schema'] as Node,
            (ourVersion['schema'] as Node)['openAPIV3Schema'] as Node,
            `${name}/${v}`,
            problems,
          );
        }
        assert.deepEqual(problems, []);
      });
    }
  });
}
