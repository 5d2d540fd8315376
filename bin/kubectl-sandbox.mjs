#!/usr/bin/env node
// The kubectl plugin `kubectl sandbox` (pause|resume|fork|snapshot|exec NAME); kubectl finds it on PATH as kubectl-sandbox.
import { register } from 'tsx/esm/api';
register();
const { main } = await import('../src/cli/kubectl-sandbox.ts');
await main();
