/**
 * The ConversionReview handler (apiextensions.k8s.io/v1 and v1beta1 share one shape). Pure: a parsed body in,
 * the response review out. It never throws: anything wrong with the request or an object becomes a
 * `Failure` result whose message names the object and the reason, which the apiserver passes on to the client.
 */
import { convertObject } from '../../api/index.js';

export const CONVERSION_REVIEW_API_VERSIONS = ['apiextensions.k8s.io/v1', 'apiextensions.k8s.io/v1beta1'] as const;

export interface ConversionReviewResult {
  status: 'Success' | 'Failure';
  message?: string;
}

export interface ConversionReviewResponseBody {
  apiVersion: string;
  kind: 'ConversionReview';
  response: {
    uid: string;
    result: ConversionReviewResult;
    convertedObjects?: unknown[];
  };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describeObject(obj: unknown, index: number): string {
  if (!isObject(obj)) return `objects[${index}]`;
  const meta = isObject(obj['metadata']) ? obj['metadata'] : {};
  const name = typeof meta['name'] === 'string' ? meta['name'] : '';
  const ns = typeof meta['namespace'] === 'string' && meta['namespace'] !== '' ? `${meta['namespace']}/` : '';
  const kind = typeof obj['kind'] === 'string' ? obj['kind'] : 'object';
  return `${kind} ${ns}${name || `objects[${index}]`}`;
}

/** A `Failure` review for a request that could not even be parsed. */
export function failureReview(message: string, uid = ''): ConversionReviewResponseBody {
  return {
    apiVersion: CONVERSION_REVIEW_API_VERSIONS[0],
    kind: 'ConversionReview',
    response: { uid, result: { status: 'Failure', message } },
  };
}

/** Handles one review; `body` is the parsed JSON request body (anything). */
export function handleConversionReview(body: unknown): ConversionReviewResponseBody {
  const apiVersion =
    isObject(body) && (CONVERSION_REVIEW_API_VERSIONS as readonly unknown[]).includes(body['apiVersion'])
      ? (body['apiVersion'] as string)
      : CONVERSION_REVIEW_API_VERSIONS[0];
  const request = isObject(body) && isObject(body['request']) ? body['request'] : undefined;
  const uid = request && typeof request['uid'] === 'string' ? request['uid'] : '';
  const fail = (message: string): ConversionReviewResponseBody => ({
    apiVersion,
    kind: 'ConversionReview',
    response: { uid, result: { status: 'Failure', message } },
  });

  if (!isObject(body)) return fail('request body is not a JSON object');
  if (body['kind'] !== 'ConversionReview')
    return fail(`expected kind ConversionReview, got ${JSON.stringify(body['kind'])}`);
  if (!(CONVERSION_REVIEW_API_VERSIONS as readonly unknown[]).includes(body['apiVersion'])) {
    return fail(`unsupported ConversionReview apiVersion ${JSON.stringify(body['apiVersion'])}`);
  }
  if (!request) return fail('ConversionReview has no request');
  if (uid === '') return fail('ConversionReview request has no uid');
  const desired = request['desiredAPIVersion'];
  if (typeof desired !== 'string' || desired === '') return fail('ConversionReview request has no desiredAPIVersion');
  const objects = request['objects'];
  if (!Array.isArray(objects)) return fail('ConversionReview request has no objects list');

  const convertedObjects: unknown[] = new Array(objects.length);
  for (let i = 0; i < objects.length; i++) {
    try {
      convertedObjects[i] = convertObject(objects[i], desired);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      return fail(`converting ${describeObject(objects[i], i)} to ${desired}: ${reason}`);
    }
  }
  return { apiVersion, kind: 'ConversionReview', response: { uid, result: { status: 'Success' }, convertedObjects } };
}
