/**
 * Objects and lists in the shape the client negotiated (negotiation.ts): plain JSON, a `Table` for kubectl get, or
 * `PartialObjectMetadata[List]` for the metadata client. Generic over the served kind: a storage supplies the
 * object, its metadata and its table columns.
 */
import type { KubeObject } from '../api/meta.js';
import { includeObjectPolicy, type Shape } from './negotiation.js';
import type { TableColumn } from './types.js';

export interface Renderer<T> {
  apiVersion: string;
  listKind: string;
  columns: readonly TableColumn<T>[];
  toObject(item: T): KubeObject;
  metadataOf(item: T): NonNullable<KubeObject['metadata']>;
}

export interface ListMeta {
  resourceVersion: string;
  continue?: string;
}

const metaApiVersion = (version: string) => `meta.k8s.io/${version}`;

function partial<T>(r: Renderer<T>, item: T, version: string) {
  return {
    kind: 'PartialObjectMetadata',
    apiVersion: metaApiVersion(version),
    metadata: r.metadataOf(item),
  };
}

function columnDefinitions<T>(r: Renderer<T>) {
  return r.columns.map((c) => ({
    name: c.name,
    type: c.type,
    format: c.format ?? '',
    description: c.description,
    priority: c.priority,
  }));
}

function row<T>(r: Renderer<T>, item: T, include: 'None' | 'Metadata' | 'Object', version: string, now: number) {
  return {
    cells: r.columns.map((c) => c.cell(item, now)),
    ...(include === 'None' ? {} : { object: include === 'Object' ? r.toObject(item) : partial(r, item, version) }),
  };
}

/** A Table of `items`; `withColumns` false for watch events after the first (kubectl reuses the first's). */
export function table<T>(
  r: Renderer<T>,
  items: readonly T[],
  shape: Extract<Shape, { kind: 'table' }>,
  query: URLSearchParams,
  meta: ListMeta | undefined,
  withColumns = true,
) {
  const include = includeObjectPolicy(query.get('includeObject'));
  const now = Date.now();
  return {
    kind: 'Table',
    apiVersion: metaApiVersion(shape.version),
    metadata: meta ?? {},
    columnDefinitions: withColumns ? columnDefinitions(r) : [],
    rows: items.map((i) => row(r, i, include, shape.version, now)),
  };
}

export function renderOne<T>(r: Renderer<T>, item: T, shape: Shape, query: URLSearchParams): unknown {
  switch (shape.kind) {
    case 'object':
      return r.toObject(item);
    case 'partial':
      return partial(r, item, shape.version);
    case 'table':
      return table(r, [item], shape, query, { resourceVersion: r.metadataOf(item).resourceVersion ?? '' });
  }
}

export function renderList<T>(
  r: Renderer<T>,
  items: readonly T[],
  meta: ListMeta,
  shape: Shape,
  query: URLSearchParams,
): unknown {
  const metadata = { resourceVersion: meta.resourceVersion, ...(meta.continue ? { continue: meta.continue } : {}) };
  switch (shape.kind) {
    case 'object':
      return { apiVersion: r.apiVersion, kind: r.listKind, metadata, items: items.map((i) => r.toObject(i)) };
    case 'partial':
      return {
        apiVersion: metaApiVersion(shape.version),
        kind: 'PartialObjectMetadataList',
        metadata,
        items: items.map((i) => partial(r, i, shape.version)),
      };
    case 'table':
      return table(r, items, shape, query, metadata);
  }
}

/** `5m`, `3h10m`, `2d` as kubectl prints ages (HumanDuration); negative means in the future. */
export function humanDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  const fmt = (): string => {
    if (s < 120) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 10) return `${m}m${s % 60 ? `${s % 60}s` : ''}`;
    if (m < 180) return `${m}m`;
    const h = Math.floor(m / 60);
    if (h < 8) return `${h}h${m % 60 ? `${m % 60}m` : ''}`;
    if (h < 48) return `${h}h`;
    const d = Math.floor(h / 24);
    if (d < 8) return `${d}d${h % 24 ? `${h % 24}h` : ''}`;
    if (d < 730) return `${d}d`;
    return `${Math.floor(d / 365)}y`;
  };
  return fmt();
}
