// Lint rules: typed TypeScript rules plus the module boundaries of the README's folder table ("Architecture")
// (api <- kube <- operator/apiserver/sandboxd; sandboxd -> vmm -> guest). src/pki (X.509) is a leaf every layer
// may use (the local cluster, the kubelet certs, the webhook), so it imports none of them.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const boundary = (from, forbidden) => ({
  files: [`src/${from}/**/*.ts`],
  rules: {
    'no-restricted-imports': [
      'error',
      {
        patterns: forbidden.map((f) => ({
          group: [`**/${f}/**`, `../${f}/*`],
          message: `src/${from} must not import src/${f}`,
        })),
      },
    ],
  },
});

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'agent/**', 'deploy/**', '**/*.gen.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  boundary('api', ['kube', 'operator', 'apiserver', 'sandboxd', 'vmm', 'guest', 'cluster', 'cli']),
  boundary('kube', ['operator', 'apiserver', 'sandboxd', 'vmm', 'guest', 'cli']),
  boundary('operator', ['apiserver', 'sandboxd', 'vmm', 'guest', 'cli']),
  boundary('apiserver', ['operator', 'sandboxd', 'vmm', 'guest', 'cli']),
  boundary('vmm', ['api', 'kube', 'operator', 'apiserver', 'sandboxd', 'cli', 'cluster']),
  boundary('guest', ['api', 'kube', 'operator', 'apiserver', 'sandboxd', 'vmm', 'cli', 'cluster']),
  boundary('pki', ['api', 'kube', 'operator', 'apiserver', 'sandboxd', 'vmm', 'guest', 'cli', 'cluster']),
);
