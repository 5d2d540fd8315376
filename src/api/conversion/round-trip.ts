/**
 * The generic part of every v1alpha1 <-> v1beta1 conversion, on top of a kind's "core" mapping (docs/api.md
 * "The core mapping per kind", plus its v1alpha1-state annotation).
 *
 * The core mapping already makes v1alpha1 -> v1beta1 -> v1alpha1 exact: whatever v1beta1 cannot hold goes into
 * the `v1alpha1-<kind>-state` annotation. The other direction is made exact here: when the core v1beta1 ->
 * v1alpha1 -> v1beta1 trip would not give back the hub object (a stale state annotation, a beta-only field such
 * as `status.nodeName`, a hand-set reserved annotation), the v1alpha1 view carries a `v1beta1-<kind>-state`
 * annotation holding the JSON merge patch from that core result back to the hub object. Converting the view
 * back applies the patch only if it changes nothing a v1alpha1 client can see (checked by converting the
 * candidate once more); a client that edited such a field gets the plain core result instead.
 *
 * Never nested: the v1alpha1 view never holds a v1alpha1-state annotation and a hub object never holds a
 * v1beta1-state annotation (each core mapping strips both keys), so neither annotation ever ends up inside
 * the other more than once, however many round trips an object makes.
 */
import type { ObjectMeta } from '../meta.js';
import { ConversionError } from './errors.js';
import { annotation, applyMergePatch, editAnnotations, jsonEqual, mergeDiff, put, type Json } from './object-edit.js';

export interface Convertible {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

export interface CoreMapping<Hub extends Convertible, Spoke extends Convertible> {
  /** The `v1beta1-<kind>-state` key (on v1alpha1 views). */
  readonly hubStateKey: string;
  spokeToHub(spoke: Spoke): Hub;
  hubToSpoke(hub: Hub): Spoke;
}

export interface Conversion<Hub, Spoke> {
  toHub(spoke: Spoke): Hub;
  fromHub(hub: Hub): Spoke;
}

export function exactRoundTrip<Hub extends Convertible, Spoke extends Convertible>(
  core: CoreMapping<Hub, Spoke>,
): Conversion<Hub, Spoke> {
  return {
    fromHub(hub: Hub): Spoke {
      const spoke = core.hubToSpoke(hub);
      const back = core.spokeToHub(spoke);
      const patch = mergeDiff(back, hub);
      if (patch === undefined) return spoke;
      return { ...spoke, metadata: editAnnotations(spoke.metadata, [], { [core.hubStateKey]: JSON.stringify(patch) }) };
    },
    toHub(spoke: Spoke): Hub {
      const stash = annotation(spoke.metadata, core.hubStateKey);
      if (stash === undefined) return core.spokeToHub(spoke);
      const plain = { ...spoke, metadata: editAnnotations(spoke.metadata, [core.hubStateKey]) } as Spoke;
      const hub = core.spokeToHub(plain);
      let patch: Json;
      try {
        patch = JSON.parse(stash) as Json;
      } catch (err) {
        throw new ConversionError(`invalid ${core.hubStateKey} annotation: ${(err as Error).message}`, { cause: err });
      }
      const candidate = applyMergePatch(hub, patch) as Hub;
      return jsonEqual(core.hubToSpoke(candidate), plain) ? candidate : hub;
    },
  };
}

/** apiVersion/kind/metadata of a converted object: metadata verbatim except the conversion keys in `strip`. */
export function envelope(obj: Convertible, apiVersion: string, strip: readonly string[]): Convertible {
  const out: Convertible = { apiVersion };
  put(out, 'kind', obj.kind);
  put(out, 'metadata', editAnnotations(obj.metadata, strip));
  return out;
}
