/**
 * Comments in src/ cite documents of this repository only: the design facts the code relies on are written into
 * docs/ (in our words), so a reader never needs a document they cannot open. Every `*.md` a comment names must
 * exist, and a section it names (`docs/x.md "Heading"`) must be a heading there; the private specifications the
 * project was built from, `spec §...` and paths into the shared folder are refused. Published standards (RFC n §x,
 * a protocol draft's §x) and URLs are fine.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

const ROOT = join(import.meta.dirname, '../..');

/** Documents outside the repository that comments used to cite (the specifications and studies in ../shared). */
const OUTSIDE =
  /\b(agent-sandbox-spec|cocoonstack[- ]spec|microvm-substrate|aggregated-apiserver\.md|architecture\.md|style\.md|e2b-protocol|e2b-sdk-current|kubernetes-binaries\.md)|\bspec §|(^|[^\w])\.\.\/shared\b|\bshared\/(spec|reference)\b/i;

interface Comment {
  file: string;
  line: number;
  endLine: number;
  text: string;
}

/** Every comment of a TypeScript file, its lines joined (a `*` gutter removed) so a citation may wrap. */
function tsComments(file: string): Comment[] {
  const text = readFileSync(file, 'utf8');
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const lineOf = (pos: number) => src.getLineAndCharacterOfPosition(pos).line + 1;
  const seen = new Map<number, Comment>();
  const take = (ranges: ts.CommentRange[] | undefined) => {
    for (const r of ranges ?? []) {
      if (seen.has(r.pos)) continue;
      const body = text
        .slice(r.pos, r.end)
        .replace(/^\/\*\*?|\*\/$|^\/\//g, '')
        .split('\n')
        .map((l) => l.replace(/^\s*\*?\s?/, ''))
        .join(' ');
      seen.set(r.pos, { file, line: lineOf(r.pos), endLine: lineOf(r.end), text: body });
    }
  };
  const visit = (n: ts.Node) => {
    // Comments lie before a node or after one (the last statement of a block before its `}`).
    take(ts.getLeadingCommentRanges(text, n.pos));
    take(ts.getLeadingCommentRanges(text, n.end));
    ts.forEachChild(n, visit);
  };
  visit(src);
  take(ts.getLeadingCommentRanges(text, src.endOfFileToken.pos));
  return mergeLineComments([...seen.values()].sort((a, b) => a.line - b.line));
}

/** Consecutive `//` lines are one comment (a citation may continue on the next line). */
function mergeLineComments(comments: Comment[]): Comment[] {
  const out: Comment[] = [];
  for (const c of comments) {
    const prev = out[out.length - 1];
    if (prev && c.line === prev.endLine + 1) {
      prev.text = `${prev.text} ${c.text}`;
      prev.endLine = c.endLine;
    } else out.push({ ...c });
  }
  return out;
}

/** Comment lines of the shell scripts and the kernel config in src/ (`#` lines). */
function hashComments(file: string): Comment[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  return mergeLineComments(
    lines.flatMap((l, i) =>
      /^\s*#/.test(l) ? [{ file, line: i + 1, endLine: i + 1, text: l.replace(/^\s*#+\s?/, '') }] : [],
    ),
  );
}

function sources(): Comment[] {
  const all = readdirSync(join(ROOT, 'src'), { recursive: true, encoding: 'utf8' }).map((f) => join(ROOT, 'src', f));
  return all.flatMap((f) => (f.endsWith('.ts') ? tsComments(f) : /\.(sh|config)$/.test(f) ? hashComments(f) : []));
}

const headingsOf = new Map<string, Set<string>>();
function headings(doc: string): Set<string> {
  let h = headingsOf.get(doc);
  if (!h) {
    h = new Set(
      readFileSync(doc, 'utf8')
        .split('\n')
        .filter((l) => /^#{1,6} /.test(l))
        .map((l) => l.replace(/^#+ /, '').trim()),
    );
    headingsOf.set(doc, h);
  }
  return h;
}

/** What is wrong with one comment's citations, if anything. A section is named by its title (without a trailing parenthesis). */
function problems(c: Comment): string[] {
  const where = `${relative(ROOT, c.file)}:${c.line}`;
  const out: string[] = [];
  const outside = OUTSIDE.exec(c.text);
  if (outside) out.push(`${where} cites a document outside the repository: "${outside[0]}"`);
  for (const m of c.text.matchAll(/§/g)) {
    const before = c.text.slice(Math.max(0, m.index - 40), m.index);
    if (!/(RFC \d+|draft)\b[^§]*$/i.test(before))
      out.push(`${where} cites a section (§) of no published standard: "…${before}§"`);
  }
  for (const m of c.text.matchAll(/(?<![\w/.:-])((?:[\w.-]+\/)*[\w.-]+\.md)\b((?:,?\s*"[^"]+")*)/g)) {
    const [, path, sections] = m;
    const target = [join(ROOT, path!), join(dirname(c.file), path!)].find((p) => existsSync(p));
    if (!target) {
      out.push(`${where} cites ${path}, which is not in the repository`);
      continue;
    }
    for (const s of sections!.matchAll(/"([^"]+)"/g))
      if (![...headings(target)].some((h) => h === s[1] || h.startsWith(`${s[1]} (`)))
        out.push(`${where} cites "${s[1]}" in ${path}, which has no such heading`);
  }
  return out;
}

describe('comments in src/', () => {
  const comments = sources();

  it('are read from every source (a floor on what the scan saw)', () => {
    assert.ok(comments.length > 1000, `only ${comments.length} comments`);
    const cited = comments.filter((c) => /docs\/[\w-]+\.md/.test(c.text));
    assert.ok(cited.length > 40, `only ${cited.length} comments cite docs/`);
    assert.ok(
      comments.some((c) => c.file.endsWith('kernel.config') && /PERFORMANCE\.md/.test(c.text)),
      'the kernel config comments were not read',
    );
  });

  it('cite only documents of this repository, and sections those documents have', () => {
    assert.deepEqual(comments.flatMap(problems), []);
  });

  it('the check refuses what it is for', () => {
    const c = (text: string): Comment => ({ file: join(ROOT, 'src/x.ts'), line: 1, endLine: 1, text });
    for (const bad of [
      'as the spec §9.2 says',
      '(cocoonstack-spec §1.1)',
      'see ../shared/spec/style.md',
      'agent-sandbox-spec.md',
      'the state machine of §3',
      'docs/no-such-page.md',
      'docs/errors.md "No such heading"',
    ])
      assert.notDeepEqual(problems(c(bad)), [], bad);
    assert.deepEqual(problems(c('docs/errors.md "Codes", "HTTP statuses"; RFC 5280 §4.1.2.5; SPDY draft 3, §2.6')), []);
    assert.deepEqual(problems(c('https://git.k8s.io/community/contributors/devel/api-conventions.md#types')), []);
  });
});
