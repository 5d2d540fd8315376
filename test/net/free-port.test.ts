/**
 * freePort never hands out a port twice in one process: the components it is picked for bind it later (20 sandboxd
 * nodes start together in bench/scale), and the kernel returns a closed probe's port again.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { freePort } from '../../src/net/free-port.js';

describe('freePort', () => {
  it('1 000 ports picked in a row, none bound meanwhile, are all different', async () => {
    const ports: number[] = [];
    for (let i = 0; i < 1000; i++) ports.push(await freePort());
    assert.equal(new Set(ports).size, ports.length, 'a port was handed out twice');
    assert.ok(ports.every((p) => p > 0 && p < 65536));
  });
});
