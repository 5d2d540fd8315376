/**
 * The shapes the renderings share: the install variants a chart branches on (layout × cert-manager) and the parts
 * (one template file each) the object model is grouped into.
 */
import type { Manifest, Param, ParamFactory } from './params.js';
import { CHART_NAME, type Layout } from './values.js';

export interface Variant {
  layout: Layout;
  certManager: boolean;
}

export const VARIANTS: readonly Variant[] = [
  { layout: 'crd', certManager: false },
  { layout: 'crd', certManager: true },
  { layout: 'aggregated', certManager: false },
  { layout: 'aggregated', certManager: true },
];

export interface Part {
  /** Template file (templates/<file>) and kustomize resource file. */
  file: string;
  objects: Manifest[];
  /** Helm-only Go template text before the objects (variables they use); makes the part Helm-only. */
  preamble?: string;
  /** Rendered only when this boolean value is true (kustomize: when its default is). */
  when?: Param;
}

export interface BuildContext {
  variant: Variant;
  p: ParamFactory;
  /** The release namespace (kustomize: sandbox-system). */
  ns: Param;
}

export const OPERATOR = 'sandbox-operator';
export const SANDBOXD = 'sandboxd';
export const APISERVER = 'sandbox-apiserver';

export function labels(component: string): Record<string, string> {
  return { 'app.kubernetes.io/name': component, 'app.kubernetes.io/part-of': CHART_NAME };
}

export function selector(component: string): Record<string, string> {
  return { 'app.kubernetes.io/name': component };
}

export function meta(name: string, component: string, namespace?: Param | string): Manifest {
  return { name, ...(namespace === undefined ? {} : { namespace }), labels: labels(component) };
}
