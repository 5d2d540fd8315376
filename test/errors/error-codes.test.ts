/**
 * The one error scheme (docs/errors.md): every code thrown in src/ is in the table of src/error-codes.ts, follows
 * its style, and is mapped on every HTTP surface; the families of codes built from another vocabulary (the guest
 * agent's errnos, Kubernetes Status reasons, claim reasons) cover that vocabulary. Static over the sources (the
 * TypeScript AST, the Go agent), then the mappings as the servers use them.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { ERROR_CODE_STYLE, ERROR_CODES, type ErrorCode } from '../../src/error-codes.js';
import { HTTP_MAPPINGS, HTTP_SURFACES, httpErrorOf, reasonForStatus } from '../../src/error-http.js';
import { SandboxError } from '../../src/errors.js';
import * as status from '../../src/apiserver/status.js';
import { AGENT_ERRNO_CODES } from '../../src/guest/agent-errors.js';
import { KUBE_CODE_BY_REASON, StatusError } from '../../src/kube/status-errors.js';
import { CLAIM_REASON_CODES, ClaimReasons } from '../../src/api/claim-status.js';
import { errorStatus } from '../../src/sandboxd/http-api.js';

const ROOT = join(import.meta.dirname, '../..');
const isCode = (s: string): s is ErrorCode => Object.hasOwn(ERROR_CODES, s);
const kebab = (s: string) => s.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();

function files(dir: string, ext: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .map((f) => join(ROOT, dir, f));
}

interface CodeUse {
  where: string;
  code: string | undefined;
  text: string;
}

/**
 * Every place src/ names a code: the first argument of `new SandboxError(...)` and of `super(...)` in a class that
 * extends SandboxError, and a string compared with a `.code`. `code` is undefined when the argument is built (a
 * template string or a concatenation), which the scheme does not allow: a built code escapes the table.
 */
function codeUses(): CodeUse[] {
  const uses: CodeUse[] = [];
  for (const file of files('src', '.ts').filter((f) => !f.endsWith('.gen.ts'))) {
    const src = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
    const where = (n: ts.Node) => `${relative(ROOT, file)}:${src.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
    const literals = (e: ts.Expression): Array<string | undefined> => {
      if (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) return [e.text];
      if (
        ts.isParenthesizedExpression(e) ||
        ts.isAsExpression(e) ||
        ts.isTypeAssertionExpression(e) ||
        ts.isSatisfiesExpression(e) ||
        ts.isNonNullExpression(e)
      )
        return literals(e.expression);
      if (ts.isConditionalExpression(e)) return [...literals(e.whenTrue), ...literals(e.whenFalse)];
      if (ts.isTemplateExpression(e) || (ts.isBinaryExpression(e) && e.operatorToken.kind === ts.SyntaxKind.PlusToken))
        return [undefined];
      return []; // a lookup or a variable: typed ErrorCode, checked by the compiler
    };
    const argument = (n: ts.Node, e: ts.Expression | undefined) => {
      if (e) for (const code of literals(e)) uses.push({ where: where(n), code, text: e.getText(src) });
    };
    const visit = (n: ts.Node, inSubclass: boolean): void => {
      if (ts.isClassLike(n)) {
        const ext = n.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0];
        inSubclass = ext?.expression.getText(src) === 'SandboxError';
      }
      if (ts.isNewExpression(n) && n.expression.getText(src) === 'SandboxError') argument(n, n.arguments?.[0]);
      if (inSubclass && ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.SuperKeyword)
        argument(n, n.arguments[0]);
      if (
        ts.isBinaryExpression(n) &&
        [ts.SyntaxKind.EqualsEqualsEqualsToken, ts.SyntaxKind.ExclamationEqualsEqualsToken].includes(
          n.operatorToken.kind,
        )
      ) {
        const [a, b] = [n.left, n.right];
        for (const [side, other] of [
          [a, b],
          [b, a],
        ] as const) {
          const isCodeRead = ts.isPropertyAccessExpression(side) && side.name.text === 'code';
          // errno comparisons (`(err as NodeJS.ErrnoException).code === 'ENOENT'`) are Node's codes, not ours
          if (isCodeRead && ts.isStringLiteral(other) && !/^E[A-Z0-9]+$/.test(other.text))
            uses.push({ where: where(n), code: other.text, text: n.getText(src) });
        }
      }
      ts.forEachChild(n, (c) => visit(c, inSubclass));
    };
    visit(src, false);
  }
  return uses;
}

describe('the table of error codes', () => {
  it('holds codes in one style, each with a meaning and an HTTP error status', () => {
    const entries = Object.entries(ERROR_CODES);
    assert.ok(entries.length > 100, `only ${entries.length} codes: is the table the one src/ uses?`);
    for (const [code, info] of entries) {
      assert.match(code, ERROR_CODE_STYLE, `${code} is not area.kebab-case`);
      assert.ok(Number.isInteger(info.status) && info.status >= 400 && info.status <= 599, `${code}: ${info.status}`);
      assert.ok(info.meaning.length > 5, `${code} has no meaning`);
    }
  });

  it('has every code src/ throws or matches on, and no code built at run time', () => {
    const uses = codeUses();
    // The scan sees the sources as they are: sandboxd's codes, subclass codes, comparisons (a floor, not a count).
    assert.ok(uses.length > 150, `the scan found only ${uses.length} uses`);
    for (const probe of ['vm.gone', 'sandboxd.at-capacity', 'claim.deferred', 'kube.aborted', 'agent.enoent'])
      assert.ok(
        uses.some((u) => u.code === probe),
        `the scan did not see ${probe}`,
      );
    const problems = uses.flatMap((u) =>
      u.code === undefined
        ? [`${u.where} builds a code at run time (${u.text}): use a literal or a table typed Record<..., ErrorCode>`]
        : isCode(u.code)
          ? []
          : [`${u.where} ${u.code} is not in src/error-codes.ts`],
    );
    assert.deepEqual(problems, []);
  });

  it('maps every errno the guest agent sends (agent/*.go)', () => {
    const sent = new Set<string>();
    for (const file of files('agent', '.go').filter((f) => !f.endsWith('_test.go')))
      for (const m of readFileSync(file, 'utf8').matchAll(/"(E[A-Z]{2,})"/g)) sent.add(m[1]!);
    assert.ok(sent.has('ENOENT') && sent.has('EINTERNAL'), `scan of agent/ found ${[...sent].join(' ')}`);
    for (const errno of sent) assert.ok(Object.hasOwn(AGENT_ERRNO_CODES, errno), `${errno} has no agent code`);
    for (const [errno, code] of Object.entries(AGENT_ERRNO_CODES)) {
      assert.equal(code, `agent.${errno.toLowerCase()}`);
      assert.ok(isCode(code), code);
    }
  });

  it('derives the code of a family from its vocabulary: Status reasons, claim reasons', () => {
    for (const [reason, code] of Object.entries(KUBE_CODE_BY_REASON)) {
      assert.equal(code, `kube.${kebab(reason)}`);
      const err = StatusError.fromResponse(400, JSON.stringify({ kind: 'Status', reason }), 'get', '/x');
      assert.equal(err.code, code);
    }
    assert.equal(
      StatusError.fromResponse(418, '{"kind":"Status","reason":"Teapot"}', 'get', '/x').code,
      'kube.unknown',
    );
    assert.equal(StatusError.fromResponse(404, 'not json', 'get', '/x').code, 'kube.not-found');
    for (const [reason, code] of Object.entries(status.CODE_BY_REASON))
      assert.equal(code, `apiserver.${kebab(reason)}`);
    for (const reason of Object.values(ClaimReasons)) {
      assert.equal(CLAIM_REASON_CODES[reason], `claim.${kebab(reason)}`);
      assert.ok(isCode(CLAIM_REASON_CODES[reason]), reason);
    }
  });

  it("gives sandbox-apiserver's Status helpers the status their code has in the table", () => {
    const r = { group: 'agents.x-k8s.io', resource: 'sandboxes' };
    const failures = [
      status.badRequest('x'),
      status.unauthorized(),
      status.forbidden('u', 'get', r, '/p', ''),
      status.forbiddenBecause(r, 'n', 'x'),
      status.notFound(r, 'n'),
      status.pathNotFound('/p'),
      status.methodNotAllowed('PUT', 'x'),
      status.notAcceptable('a', ['b']),
      status.alreadyExists(r, 'n'),
      status.conflict(r, 'n', 'x'),
      status.expired('x'),
      status.tooLarge(1),
      status.unsupportedMediaType('x'),
      status.invalid('Sandbox', 'agents.x-k8s.io', 'n', []),
      status.internalError('x'),
      status.serviceUnavailable('x', 1),
      status.tooManyRequests('x', 1),
    ];
    for (const f of failures) {
      assert.equal(f.code, status.CODE_BY_REASON[f.status.reason as status.StatusReason]);
      assert.equal(ERROR_CODES[f.code].status, f.httpCode, f.code);
    }
  });
});

describe('the HTTP mappings', () => {
  const reasons = new Set(Object.keys(status.CODE_BY_REASON));

  it('map every code exactly once on every surface, with its status and a Kubernetes reason', () => {
    for (const surface of HTTP_SURFACES) {
      const mapping = HTTP_MAPPINGS[surface];
      assert.equal(mapping.size, Object.keys(ERROR_CODES).length, surface);
      for (const [code, info] of Object.entries(ERROR_CODES)) {
        const m = mapping.get(code as ErrorCode);
        assert.ok(m, `${surface} does not map ${code}`);
        assert.equal(m.status, info.status, `${surface} ${code}`);
        assert.equal(m.reason, reasonForStatus(info.status));
        assert.ok(reasons.has(m.reason), `${surface} ${code}: ${m.reason} is no StatusReason sandbox-apiserver knows`);
      }
    }
  });

  it('are the only code-to-status table in src/', () => {
    const table = join(ROOT, 'src/error-codes.ts');
    for (const file of files('src', '.ts').filter((f) => f !== table)) {
      const text = readFileSync(file, 'utf8');
      assert.doesNotMatch(text, /class HttpError\b/, `${relative(ROOT, file)} has its own HttpError`);
      const m = /['"][a-z][a-z0-9-]*\.[a-z][a-z0-9-]*['"]\s*:\s*(\{\s*status:\s*)?\d{3}\b/.exec(text);
      assert.equal(m, null, `${relative(ROOT, file)} maps a code to a status: ${m?.[0]}`);
    }
  });

  it('answer known conditions with their status, anything else with 500', () => {
    const e = (code: ErrorCode) => new SandboxError(code, 'm', { hint: 'h' });
    assert.deepEqual(errorStatus(e('agent.timeout')), { status: 504, message: 'm\n  hint: h' });
    assert.equal(errorStatus(e('vm.gone')).status, 410);
    assert.equal(errorStatus(e('agent.enoent')).status, 400);
    assert.equal(errorStatus(e('sandboxd.at-capacity')).status, 429);
    assert.equal(errorStatus(e('vm.invalid-state')).status, 409);
    assert.deepEqual(errorStatus(new Error('boom')), { status: 500, message: 'boom' });
    assert.deepEqual(httpErrorOf('kubelet', e('kubelet.no-running-vm')), { status: 409, reason: 'Conflict' });
    assert.deepEqual(httpErrorOf('webhook', 'a string'), { status: 500, reason: 'InternalError' });
    const bad = status.toStatusFailure(e('apiserver.bad-request'));
    assert.equal(bad.httpCode, 400);
    assert.equal(bad.status.reason, 'BadRequest');
    assert.equal(status.toStatusFailure(new Error('x')).status.message, 'Internal error occurred: x');
    assert.equal(status.toStatusFailure(e('kube.not-found')).httpCode, 500, 'our failed kube call is our 500');
  });
});
