/**
 * The Prometheus text parsing the benches share (bench/support/apiserver-metrics.ts): label matching, escaped quotes
 * in label values, label-less samples and the series of other metrics that share a prefix.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { apiserverCounts, parseCounter, sumWhere } from '../../bench/support/apiserver-metrics.js';

const TEXT = [
  '# HELP apiserver_request_total Counter of apiserver requests',
  '# TYPE apiserver_request_total counter',
  'apiserver_request_total{code="201",resource="sandboxes",verb="POST"} 3',
  'apiserver_request_total{code="409",resource="sandboxes",verb="POST"} 2',
  'apiserver_request_total{code="200",resource="sandboxes",subresource="status",verb="PUT"} 5',
  'apiserver_request_total{code="200",resource="pods",verb="WATCH"} 7',
  'apiserver_request_total{code="200",path="/metrics",verb="GET"} 11',
  'apiserver_request_total_extra{resource="sandboxes",verb="POST"} 100',
  'rest_client_requests_total{host="h",message="say \\"hi\\", then go",verb="create"} 4',
  'process_cpu_seconds_total 1.5',
].join('\n');

describe('bench Prometheus text', () => {
  it('sums the samples whose labels match, by string or RegExp, and only of the metric named', () => {
    assert.equal(sumWhere(TEXT, 'apiserver_request_total', { verb: 'POST', resource: 'sandboxes' }), 5);
    assert.equal(sumWhere(TEXT, 'apiserver_request_total', { verb: /^(POST|PUT)$/ }), 10);
    assert.equal(sumWhere(TEXT, 'apiserver_request_total', { verb: 'DELETE' }), 0);
    assert.equal(sumWhere(TEXT, 'rest_client_requests_total', { verb: 'create' }), 4, 'an escaped quote in a value');
    assert.equal(sumWhere(TEXT, 'process_cpu_seconds_total', {}), 1.5, 'a sample without labels');
  });

  it("keys kube-apiserver's requests by verb and resource, leaving out watches and non-resource paths", () => {
    assert.deepEqual(
      [...apiserverCounts(TEXT)],
      [
        ['POST sandboxes', 5],
        ['PUT sandboxes/status', 5],
      ],
    );
    assert.deepEqual([...parseCounter(TEXT, 'missing_total', () => 'x')], []);
  });
});
