/**
 * deploy/kustomize: a base with the objects both layouts share and one overlay per layout with the rest, all the
 * chart's objects with default values (the aggregated overlay with cert-manager: without it only Helm can
 * generate sandbox-apiserver's certificate). `kubectl kustomize deploy/kustomize/overlays/<layout>` renders what
 * `helm template` does for the same choices (test/deploy/install.test.ts compares them).
 */
import { SandboxError } from '../errors.js';
import { GENERATED } from './helm.js';
import type { Part, Variant } from './model.js';
import { concrete, toYaml, type Manifest } from './params.js';
import { buildParts } from './parts.js';
import type { Layout } from './values.js';

/** The variant each overlay renders. */
export const OVERLAYS: Record<Layout, Variant> = {
  crd: { layout: 'crd', certManager: false },
  aggregated: { layout: 'aggregated', certManager: true },
};

/** Whether a part is in the default rendering (its `when` value defaults to true, or it has none). */
function included(part: Part): boolean {
  if (part.when && part.when.value !== true) return false;
  if (part.preamble) throw new SandboxError('deploy.kustomize', `${part.file} is Helm-only but in a kustomize variant`);
  return true;
}

const identity = (o: Manifest) => {
  const m = o['metadata'] as { name?: string; namespace?: unknown };
  return `${String(o['apiVersion'])}/${String(o['kind'])}/${String(m.namespace ?? '')}/${m.name ?? ''}`;
};

function kustomization(resources: string[]): string {
  return `${GENERATED}${toYaml({ apiVersion: 'kustomize.config.k8s.io/v1beta1', kind: 'Kustomization', resources })}`;
}

const document = (objects: Manifest[]) => `${GENERATED}${objects.map((o) => `---\n${toYaml(o)}`).join('')}`;

/** Path under deploy/kustomize -> content. */
export function renderKustomize(): Record<string, string> {
  const rendered = Object.fromEntries(
    Object.entries(OVERLAYS).map(([layout, variant]) => [
      layout,
      buildParts(variant)
        .filter(included)
        .map((p) => ({ file: p.file, objects: p.objects.map((o, i) => concrete(o, `${p.file}#${i}`)) })),
    ]),
  ) as Record<Layout, Array<{ file: string; objects: Manifest[] }>>;
  const textOf = (layout: Layout) =>
    new Map(rendered[layout].flatMap((p) => p.objects.map((o) => [identity(o), toYaml(o)] as const)));
  const texts = { crd: textOf('crd'), aggregated: textOf('aggregated') };
  const shared = (o: Manifest) => texts.crd.get(identity(o)) === texts.aggregated.get(identity(o));

  const files: Record<string, string> = {};
  const baseResources: string[] = [];
  for (const part of rendered.crd) {
    const objects = part.objects.filter(shared);
    if (objects.length === 0) continue;
    files[`base/${part.file}`] = document(objects);
    baseResources.push(part.file);
  }
  files['base/kustomization.yaml'] = kustomization(baseResources);
  for (const layout of Object.keys(OVERLAYS) as Layout[]) {
    const resources = ['../../base'];
    for (const part of rendered[layout]) {
      const objects = part.objects.filter((o) => !shared(o));
      if (objects.length === 0) continue;
      files[`overlays/${layout}/${part.file}`] = document(objects);
      resources.push(part.file);
    }
    files[`overlays/${layout}/kustomization.yaml`] = kustomization(resources);
  }
  return files;
}
