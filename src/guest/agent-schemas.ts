/**
 * The shape of everything the guest agent sends as JSON (docs/agent-protocol.md): every RES and EVT frame, and the
 * result and events of each operation. The guest is hostile input, so a value is checked here before any of it is
 * read: a frame that does not match is a protocol error on that VM's connection (AgentClient.fail), never a
 * TypeError in a handler (a `null` RES payload, read as `res.ok`, took the whole node daemon down) and never a wrong
 * value further on (a file `size` of "1\n" reached a `content-length` header).
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';

/** Longest path the guest may name (Linux PATH_MAX). */
export const MAX_GUEST_PATH = 4096;

const SafeUint = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
const U32 = Type.Integer({ minimum: 0, maximum: 0xffff_ffff });
const GuestPath = Type.String({ maxLength: MAX_GUEST_PATH });
const Text = Type.String({ maxLength: 4096 });

/** A RES frame: `{ok: true, ...result}` or `{ok: false, code, message}`. */
export const ResFrame = Type.Union([
  Type.Object({ ok: Type.Literal(true) }),
  Type.Object({ ok: Type.Literal(false), code: Type.Optional(Text), message: Type.Optional(Type.String()) }),
]);

/** An EVT frame: an object naming its event. */
export const EvtFrame = Type.Object({ type: Type.String({ maxLength: 64 }) });

export const HelloResult = Type.Object({
  protocol: Type.Integer(),
  version: Type.String({ maxLength: 256 }),
  pid: Type.Integer(),
  features: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 256 })),
});

/**
 * A file's metadata (e2b's `X-Metadata-*` pairs, kept as extended attributes): the agent reports at most 4 KiB of
 * printable pairs, as e2b counts them (docs/agent-protocol.md).
 */
export const FileMetadataSchema = Type.Record(
  Type.String({ minLength: 1, maxLength: 255 }),
  Type.String({ maxLength: 4096 }),
  {
    maxProperties: 512,
  },
);

export const FileStatSchema = Type.Object({
  path: GuestPath,
  name: GuestPath,
  type: Type.Union([Type.Literal('file'), Type.Literal('dir'), Type.Literal('symlink'), Type.Literal('other')]),
  size: SafeUint,
  mode: U32,
  mtimeMs: Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER }),
  uid: Type.Optional(U32),
  gid: Type.Optional(U32),
  target: Type.Optional(GuestPath),
  metadata: Type.Optional(FileMetadataSchema),
});

export const ListResult = Type.Object({
  entries: Type.Array(FileStatSchema, { maxItems: 10_000 }),
  truncated: Type.Optional(Type.Boolean()),
});

/** file.read and file.write: the bytes read or written (and a write's metadata, when it set some). */
export const SizeResult = Type.Object({ size: SafeUint, metadata: Type.Optional(FileMetadataSchema) });

export const ExecResultSchema = Type.Object({
  exitCode: Type.Integer({ minimum: -(2 ** 31), maximum: 2 ** 31 - 1 }),
  timedOut: Type.Optional(Type.Boolean()),
  signal: Type.Optional(Type.String({ maxLength: 32 })),
});

const Gauge = Type.Optional(Type.Number({ minimum: 0 }));
export const HealthResult = Type.Object({
  uptimeMs: Gauge,
  load1: Gauge,
  processes: Gauge,
  memTotalKiB: Gauge,
  memAvailableKiB: Gauge,
  memCachedKiB: Gauge,
  diskTotalKiB: Gauge,
  diskFreeKiB: Gauge,
});

export const ExecEvent = Type.Object({
  type: Type.Literal('started'),
  pid: Type.Integer({ minimum: 1, maximum: 2 ** 31 - 1 }),
});

export const WatchEventSchema = Type.Union([
  Type.Object({ type: Type.Literal('watching') }),
  Type.Object({
    type: Type.Literal('fs'),
    op: Type.Union(['create', 'write', 'remove', 'rename', 'chmod'].map((o) => Type.Literal(o))),
    path: GuestPath,
  }),
]);

export const TcpEvent = Type.Object({ type: Type.Literal('connected') });

/** `upstream.start`: the addresses upstream sandboxd's two listeners are bound to (already: it was running). */
export const UpstreamStartResult = Type.Object({
  grpc: Type.String({ maxLength: 64 }),
  rest: Type.String({ maxLength: 64 }),
  rootDir: GuestPath,
  already: Type.Optional(Type.Boolean()),
});

/** A compiled check of one of the schemas above (compiled once; RES and EVT frames are on every operation's path). */
export type Check = TypeCheck<TSchema>;

const compiled = new Map<TSchema, Check>();

export function check(schema: TSchema): Check {
  let c = compiled.get(schema);
  if (!c) {
    c = TypeCompiler.Compile(schema);
    compiled.set(schema, c);
  }
  return c;
}

/** Why `value` does not match, in one line ("/size: Expected integer"), or undefined when it does. */
export function problem(c: Check, value: unknown): string | undefined {
  if (c.Check(value)) return undefined;
  const first = c.Errors(value).First();
  return first ? `${first.path || '/'}: ${first.message}` : 'does not match';
}
